package tlsconf

import (
	"crypto/x509"
	"fmt"
	"os"
)

// CertPool reads the PEM certificates of file into base, or into a new
// pool when base is nil, and returns the pool: the CAs a TLS peer is
// verified against (a listener's client CAs, the Kafka brokers', an HTTP
// sink's, the server `wowd status` asks). A file without a PEM certificate
// is an error, so a wrong path or a key given for a certificate is not
// taken for "trust nothing". Its errors name the file, never its content.
func CertPool(file string, base *x509.CertPool) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := base
	if pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no PEM certificate in %s", file)
	}
	return pool, nil
}
