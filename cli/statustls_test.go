package cli

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/tlsconf/tlstest"
)

// wowd status reaches an admin listener with its own CA and client
// certificates (tls.cert-file with tls.client-ca-file): --ca-file trusts
// the listener's CA, --cert-file and --key-file present a certificate.
// Half a pair, or a file that is not PEM, is a usage error (exit 2).
func TestStatusOverMutualTLS(t *testing.T) {
	body, err := json.Marshal(sampleStatus(0))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	clientCA := tlstest.NewCA(t, "clients")
	files := tlstest.WriteServer(t, dir, "admin", clientCA)
	cert, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(body) }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: clientCA.Pool(), ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	defer srv.Close()

	caFile := filepath.Join(dir, "admin-ca.crt")
	if err := os.WriteFile(caFile, files.CA.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	client := clientCA.Client(t, "operator")
	certFile, keyFile := filepath.Join(dir, "op.crt"), filepath.Join(dir, "op.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: client.Certificate[0]}), 0o600); err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(client.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	status := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := run(append([]string{"status", "--admin", srv.URL}, args...), &out, &errOut, nil, &handler.Registry{})
		return code, out.String() + errOut.String()
	}
	if code, out := status("--ca-file", caFile, "--cert-file", certFile, "--key-file", keyFile); code != ExitOK || !strings.Contains(out, "carts on pod-1") {
		t.Errorf("with the CA and a client certificate: exit %d\n%s", code, out)
	}
	if code, out := status("--ca-file", caFile); code != ExitFailure || !strings.Contains(out, "reading the status") {
		t.Errorf("without a client certificate: exit %d, want %d (cannot be read)\n%s", code, ExitFailure, out)
	}
	if code, out := status("--cert-file", certFile, "--key-file", keyFile); code != ExitFailure || !strings.Contains(out, "certificate") {
		t.Errorf("without the listener's CA: exit %d, want %d (an unknown authority)\n%s", code, ExitFailure, out)
	}
	for _, bad := range [][]string{{"--cert-file", certFile}, {"--key-file", keyFile}, {"--ca-file", keyFile}, {"--ca-file", filepath.Join(dir, "none")}} {
		if code, out := status(bad...); code != ExitConfig {
			t.Errorf("%q: exit %d, want %d\n%s", bad, code, ExitConfig, out)
		}
	}
}
