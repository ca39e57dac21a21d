// Package tlsconf serves TLS on wowd's own listeners (metrics, ingest,
// admin) from PEM files: a certificate and its key, and optionally the CAs
// whose client certificates are required (mutual TLS). TLS 1.2 is the
// least version accepted.
//
// The files are read when the configuration is opened; after that a
// handshake looks at them at most once a second (a bounded poll with no
// goroutine of its own) and reads them again when one changed, so a
// certificate can be rotated by replacing its files, as cert-manager and
// Kubernetes Secret volumes do, without a restart. Files that changed but
// cannot be used (a certificate whose new key has not been written yet, a
// half-written file) leave the previous pair in use until they change
// again.
//
// CertPool reads a CA file for any of wowd's TLS, its clients' included
// (the Kafka clients, the HTTP sinks, `wowd status`).
package tlsconf

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Files names the PEM files of a listener's TLS. Its fields are those of
// config.ListenerTLS, so one converts to the other.
type Files struct {
	CertFile     string // certificate chain, leaf first
	KeyFile      string // private key of the certificate
	ClientCAFile string // CAs of the client certificates required; "" asks for none
}

// checkEvery is how often, at most, a handshake looks whether the files
// changed.
const checkEvery = time.Second

// Reloader hands each TLS handshake the configuration built from the files'
// current contents. It is safe for concurrent use and owns no goroutine:
// nothing needs stopping.
type Reloader struct {
	files Files
	every time.Duration
	log   *zap.Logger
	now   func() time.Time

	mu     sync.Mutex  // guards cur, seen, next, failed and stats
	cur    *tls.Config // built from the files last read successfully
	seen   [3]os.FileInfo
	next   time.Time // when to look at the files again
	failed string    // why the files last read could not be used; "": they could
	stats  Stats
}

// Stats counts what a Reloader did with changed files.
type Stats struct {
	Reloads  int // times changed files were read and put in use
	Failures int // distinct reasons changed files could not be used, in a row of tries
}

// New reads the files and returns a Reloader serving them. Files that
// cannot be read, or do not hold a usable pair (or CA), are an error: the
// configuration is wrong. log (nil: none) receives a line per reload.
func New(f Files, log *zap.Logger) (*Reloader, error) {
	if f.CertFile == "" || f.KeyFile == "" {
		return nil, errors.New("tls: both cert-file and key-file are required")
	}
	if log == nil {
		log = zap.NewNop()
	}
	r := &Reloader{files: f, every: checkEvery, log: log, now: time.Now}
	seen := r.stat()
	cfg, err := build(f)
	if err != nil {
		return nil, err
	}
	r.cur, r.seen, r.next = cfg, seen, r.now().Add(r.every)
	return r, nil
}

// Config returns a server configuration whose handshakes use the files'
// current contents. Give it to tls.NewListener or http.Server.TLSConfig.
func (r *Reloader) Config() *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		NextProtos:         nextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return r.current(), nil },
	}
}

// Listen wraps ln so that its connections speak TLS with Config.
func (r *Reloader) Listen(ln net.Listener) net.Listener {
	return tls.NewListener(ln, r.Config())
}

// MutualTLS reports whether clients must present a certificate signed by
// the client CAs.
func (r *Reloader) MutualTLS() bool { return r.files.ClientCAFile != "" }

// Stats returns what the Reloader did so far.
func (r *Reloader) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

var nextProtos = []string{"h2", "http/1.1"}

// current returns the configuration in use, reading the files again if it
// is time to look and one of them changed, or changed files could not be
// used the last time: they are read at every look until they can, since
// the fix need not change what the look compares (a key rewritten in place
// within the same second and at the same size as the certificate before
// it, a mode fixed by chmod). Each distinct reason is logged once.
func (r *Reloader) current() *tls.Config {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if now.Before(r.next) {
		return r.cur
	}
	r.next = now.Add(r.every)
	seen := r.stat()
	if r.failed == "" && sameVersions(r.seen, seen) {
		return r.cur
	}
	r.seen = seen
	cfg, err := build(r.files)
	if err != nil {
		if err.Error() != r.failed {
			r.failed = err.Error()
			r.stats.Failures++
			r.log.Warn("TLS files changed but cannot be used; keeping the previous certificate", zap.Error(err))
		}
		return r.cur
	}
	r.cur, r.failed = cfg, ""
	r.stats.Reloads++
	r.log.Info("TLS files read again", zap.String("cert_file", r.files.CertFile), zap.String("expires", expiry(cfg)))
	return r.cur
}

// stat returns the versions of the files; a missing one is nil.
func (r *Reloader) stat() [3]os.FileInfo {
	var out [3]os.FileInfo
	for i, p := range []string{r.files.CertFile, r.files.KeyFile, r.files.ClientCAFile} {
		if p == "" {
			continue
		}
		if info, err := os.Stat(p); err == nil { // follows symbolic links, as Secret volumes use
			out[i] = info
		}
	}
	return out
}

func sameVersions(a, b [3]os.FileInfo) bool {
	for i := range a {
		if (a[i] == nil) != (b[i] == nil) {
			return false
		}
		if a[i] != nil && !(os.SameFile(a[i], b[i]) && a[i].ModTime().Equal(b[i].ModTime()) && a[i].Size() == b[i].Size()) {
			return false
		}
	}
	return true
}

// build reads the files into a server configuration.
func build(f Files) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("loading the certificate %s and key %s: %w", f.CertFile, f.KeyFile, err)
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		NextProtos:   nextProtos,
		Certificates: []tls.Certificate{cert},
	}
	if f.ClientCAFile != "" {
		pool, err := CertPool(f.ClientCAFile, nil)
		if err != nil {
			return nil, fmt.Errorf("reading the client CAs: %w", err)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// expiry is when the leaf certificate of cfg expires, for the logs.
func expiry(cfg *tls.Config) string {
	if leaf := cfg.Certificates[0].Leaf; leaf != nil {
		return leaf.NotAfter.UTC().Format(time.RFC3339)
	}
	return ""
}
