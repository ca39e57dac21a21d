package handlers

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/handlerconfig"
)

// testCA is a certificate authority for tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // PEM of cert
}

var serial atomic.Int64

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: "wowd test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{cert: cert, key: key, file: filepath.Join(t.TempDir(), "ca.pem")}
	writePEM(t, ca.file, "CERTIFICATE", der)
	return ca
}

// issue returns a certificate signed by ca for a server on 127.0.0.1 or a
// client, with its PEM files.
func (ca *testCA) issue(t *testing.T, cn string, client bool) (cert tls.Certificate, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	if client {
		tmpl.ExtKeyUsage, tmpl.IPAddresses = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, cn+".pem"), filepath.Join(dir, cn+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", keyDER)
	cert, err = tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return cert, certFile, keyFile
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// newTLSServer starts an https server on 127.0.0.1 with a certificate of
// ca that requires a client certificate of ca, speaking HTTP/2 when asked.
func newTLSServer(t *testing.T, ca *testCA, http2 bool, fn http.HandlerFunc) *httptest.Server {
	t.Helper()
	cert, _, _ := ca.issue(t, "server", false)
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	srv := httptest.NewUnstartedServer(fn)
	srv.EnableHTTP2 = http2
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	}
	srv.Config.ErrorLog = quietLog() // failed handshakes are expected
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// quietLog discards the log of a test server.
func quietLog() *log.Logger { return log.New(io.Discard, "", 0) }

func TestHTTPMutualTLS(t *testing.T) {
	ca := newTestCA(t)
	var got atomic.Value // client certificate CN
	var requests atomic.Int32
	srv := newTLSServer(t, ca, false, func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		got.Store(r.TLS.PeerCertificates[0].Subject.CommonName)
	})
	_, certFile, keyFile := ca.issue(t, "wowd-client", true)

	t.Run("client certificate", func(t *testing.T) {
		h := build(t, "http", sinkConfig(srv.URL, map[string]any{
			"tls": map[string]any{"ca-file": ca.file, "cert-file": certFile, "key-file": keyFile},
		}), handler.Deps{})
		acks := newAcks(t)
		h.Handle(context.Background(), testMessage(1), acks.ack(1))
		if err := acks.wait(t, 1); err != nil {
			t.Fatalf("ack %v", err)
		}
		if cn, _ := got.Load().(string); cn != "wowd-client" {
			t.Errorf("server saw client certificate %q", cn)
		}
	})
	t.Run("no client certificate", func(t *testing.T) {
		h := build(t, "http", sinkConfig(srv.URL, map[string]any{
			"tls": map[string]any{"ca-file": ca.file}, "max-attempts": 2,
		}), handler.Deps{})
		acks := newAcks(t)
		before := requests.Load()
		h.Handle(context.Background(), testMessage(2), acks.ack(2))
		err := acks.wait(t, 2)
		wantClass(t, err, handler.Transient)
		if requests.Load() != before {
			t.Errorf("a request got through without a client certificate")
		}
		t.Logf("error: %v", err) // usually "remote error: tls: certificate required"
	})
	t.Run("unknown CA", func(t *testing.T) {
		h := build(t, "http", sinkConfig(srv.URL, map[string]any{
			"tls": map[string]any{"cert-file": certFile, "key-file": keyFile}, "max-attempts": 1,
		}), handler.Deps{})
		acks := newAcks(t)
		h.Handle(context.Background(), testMessage(3), acks.ack(3))
		err := acks.wait(t, 3)
		wantClass(t, err, handler.Transient)
		if !strings.Contains(err.Error(), "unknown authority") {
			t.Errorf("error %q", err)
		}
	})
	t.Run("insecure skip verify", func(t *testing.T) {
		h := build(t, "http", sinkConfig(srv.URL, map[string]any{
			"tls": map[string]any{"cert-file": certFile, "key-file": keyFile, "insecure-skip-verify": true},
		}), handler.Deps{})
		acks := newAcks(t)
		h.Handle(context.Background(), testMessage(4), acks.ack(4))
		if err := acks.wait(t, 4); err != nil {
			t.Fatalf("ack %v", err)
		}
	})
}

func TestHTTPSpeaksHTTP2(t *testing.T) {
	var protos atomic.Value
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		protos.Store(r.Proto)
		if r.ProtoMajor != 2 {
			w.WriteHeader(http.StatusHTTPVersionNotSupported)
		}
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	writePEM(t, caFile, "CERTIFICATE", srv.Certificate().Raw)

	h := build(t, "http", sinkConfig(srv.URL, map[string]any{"tls": map[string]any{"ca-file": caFile}, "max-attempts": 1}), handler.Deps{})
	acks := newAcks(t)
	for off := range int64(5) {
		h.Handle(context.Background(), testMessage(off), acks.ack(off))
	}
	for off := range int64(5) {
		if err := acks.wait(t, off); err != nil {
			t.Fatalf("offset %d: %v (protocol %v)", off, err, protos.Load())
		}
	}
	if p := protos.Load(); p != "HTTP/2.0" {
		t.Errorf("protocol %v, want HTTP/2.0", p)
	}
}

// TestHTTPReusesConnections checks keep-alive: many requests, success or
// failure, go over about max-concurrency connections.
func TestHTTPReusesConnections(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("wowd-attempt") == "1" && r.Header.Get("kafka-offset") != "0" {
			http.Error(w, strings.Repeat("busy ", 100), http.StatusServiceUnavailable) // a body to drain
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	h := build(t, "http", sinkConfig(srv.URL, map[string]any{"max-concurrency": 2}), handler.Deps{})
	acks := newAcks(t)
	const n = 50
	for off := range int64(n) {
		h.Handle(context.Background(), testMessage(off), acks.ack(off))
	}
	for off := range int64(n) {
		if err := acks.wait(t, off); err != nil {
			t.Fatalf("offset %d: %v", off, err)
		}
	}
	if c := conns.Load(); c > 4 { // 2, and some slack for a dial racing a returning connection
		t.Errorf("%d connections for %d requests with max-concurrency 2", c, 2*n-1)
	}
}

func TestHTTPTLSFileErrors(t *testing.T) {
	ca := newTestCA(t)
	_, certFile, keyFile := ca.issue(t, "c", true)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tls  map[string]any
		want string
	}{
		{map[string]any{"ca-file": "/nonexistent/ca.pem"}, "tls.ca-file: open /nonexistent/ca.pem"},
		{map[string]any{"ca-file": notPEM}, "tls.ca-file: no PEM certificate in " + notPEM},
		{map[string]any{"cert-file": certFile, "key-file": certFile}, "tls.cert-file, tls.key-file: "},
		{map[string]any{"cert-file": keyFile, "key-file": keyFile}, "tls.cert-file, tls.key-file: "},
	} {
		spec, _ := handler.Default().Lookup("http")
		cfg, err := handlerconfig.Decode(spec, map[string]any{"url": "https://127.0.0.1:1/", "tls": tc.tls})
		if err != nil {
			t.Fatal(err)
		}
		_, err = spec.New(cfg, handler.Deps{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.tls, err, tc.want)
		}
	}
}
