package tlsconf

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wowd/wowd/internal/tlsconf/tlstest"
)

// CertPool is what every CA file of wowd goes through (the listeners'
// client CAs, the Kafka clients', the HTTP sinks', `wowd status --ca-file`):
// a certificate it holds verifies, one it does not hold does not, the CAs
// of a base pool stay, and a file that holds no certificate is refused by
// name.
func TestCertPool(t *testing.T) {
	dir := t.TempDir()
	ca, other := tlstest.NewCA(t, "ca"), tlstest.NewCA(t, "other")
	file := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(file, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	verifies := func(pool *x509.CertPool, c *tlstest.CA) bool {
		_, err := c.Cert.Verify(x509.VerifyOptions{Roots: pool})
		return err == nil
	}

	pool, err := CertPool(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !verifies(pool, ca) || verifies(pool, other) {
		t.Errorf("a pool of ca.pem: verifies ca %v (want true), other %v (want false)", verifies(pool, ca), verifies(pool, other))
	}

	pool, err = CertPool(file, other.Pool())
	if err != nil {
		t.Fatal(err)
	}
	if !verifies(pool, ca) || !verifies(pool, other) {
		t.Errorf("ca.pem added to a pool of other: verifies ca %v, other %v; want both", verifies(pool, ca), verifies(pool, other))
	}

	key := filepath.Join(dir, "key.pem")
	if err := os.WriteFile(key, []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := CertPool(key, nil); err == nil || !strings.Contains(err.Error(), "no PEM certificate in "+key) || strings.Contains(err.Error(), "AAAA") {
		t.Errorf("a key given for a CA file: %v; want an error naming %s, without its content", err, key)
	}
	if _, err := CertPool(filepath.Join(dir, "missing.pem"), nil); !os.IsNotExist(err) {
		t.Errorf("a missing file: %v; want not exist", err)
	}
}
