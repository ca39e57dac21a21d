// Package tlstest makes certificate authorities and certificates for tests
// of TLS listeners: servers on 127.0.0.1 and clients for mutual TLS.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

var serial atomic.Int64

// CA is a certificate authority made for a test.
type CA struct {
	Cert *x509.Certificate
	PEM  []byte // the CA certificate, PEM
	key  *ecdsa.PrivateKey
}

// NewCA makes a CA valid for an hour around now.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Pool is a pool holding only the CA.
func (c *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.Cert)
	return p
}

// Server makes a server certificate for 127.0.0.1 and localhost, named
// name, returning its PEM certificate and key.
func (c *CA) Server(t testing.TB, name string) (certPEM, keyPEM []byte) {
	t.Helper()
	return c.issue(t, name, false)
}

// Client makes a client certificate named name.
func (c *CA) Client(t testing.TB, name string) tls.Certificate {
	t.Helper()
	certPEM, keyPEM := c.issue(t, name, true)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func (c *CA) issue(t testing.TB, name string, client bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:     []string{"localhost"},
	}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		tmpl.IPAddresses, tmpl.DNSNames = nil, nil
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.Cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// Files are the PEM files of a server made by [WriteServer].
type Files struct {
	CA           *CA    // signs the server certificate
	CertFile     string // server certificate
	KeyFile      string // its key
	ClientCAFile string // clientCA's certificate; "" without one
}

// WriteServer writes a server certificate named name, signed by a new CA,
// and its key into dir; with clientCA, also clientCA's certificate.
func WriteServer(t testing.TB, dir, name string, clientCA *CA) Files {
	t.Helper()
	f := Files{CA: NewCA(t, name+"-ca"), CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")}
	f.Rotate(t, name)
	if clientCA != nil {
		f.ClientCAFile = filepath.Join(dir, "ca.crt")
		Replace(t, f.ClientCAFile, clientCA.PEM)
	}
	return f
}

// Rotate writes a new server certificate named name, signed by the same
// CA, key first.
func (f Files) Rotate(t testing.TB, name string) {
	t.Helper()
	certPEM, keyPEM := f.CA.Server(t, name)
	Replace(t, f.KeyFile, keyPEM)
	Replace(t, f.CertFile, certPEM)
}

// Replace writes data to path as a Secret volume update does: a new file
// renamed over the old one.
func Replace(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// ClientConfig is a client configuration trusting the server's CA and,
// when cert is not nil, presenting it.
func (f Files) ClientConfig(cert *tls.Certificate) *tls.Config {
	c := &tls.Config{RootCAs: f.CA.Pool(), MinVersion: tls.VersionTLS12}
	if cert != nil {
		c.Certificates = []tls.Certificate{*cert}
	}
	return c
}
