package tlsconf

import (
	"crypto/tls"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/wowd/wowd/internal/tlsconf/tlstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve accepts TLS connections on 127.0.0.1 with r until the test ends,
// answering each completed handshake with "ok".
func serve(t *testing.T, r *Reloader) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tln := r.Listen(ln)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // ends when the listener closes at cleanup
		defer wg.Done()
		for {
			c, err := tln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				if err := c.(*tls.Conn).Handshake(); err != nil {
					return
				}
				_, _ = c.Write([]byte("ok"))
			}()
		}
	}()
	t.Cleanup(func() {
		_ = tln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

// dial connects with cfg and returns the server's leaf certificate's
// subject, or the error of the handshake or of reading the server's "ok"
// (with TLS 1.3 a refused client certificate shows only there).
func dial(addr string, cfg *tls.Config) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 2)
	if _, err := io.ReadFull(c, buf); err != nil {
		return "", err
	}
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
}

func newFixture(t *testing.T, clientCA *tlstest.CA) (tlstest.Files, Files) {
	t.Helper()
	f := tlstest.WriteServer(t, t.TempDir(), "server-1", clientCA)
	return f, Files{CertFile: f.CertFile, KeyFile: f.KeyFile, ClientCAFile: f.ClientCAFile}
}

// open is New with a short poll, for the rotation tests.
func open(t *testing.T, files Files) *Reloader {
	t.Helper()
	r, err := New(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.every = 10 * time.Millisecond
	return r
}

// eventually retries f until it returns true, for at most 10 seconds.
func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestServesTheCertificateAndRefusesOldVersions(t *testing.T) {
	f, files := newFixture(t, nil)
	addr := serve(t, open(t, files))
	client := f.ClientConfig(nil)
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		c := client.Clone()
		c.MinVersion, c.MaxVersion = v, v
		name, err := dial(addr, c)
		if err != nil || name != "server-1" {
			t.Errorf("%s: got %q, %v; want server-1", tls.VersionName(v), name, err)
		}
	}
	for _, v := range []uint16{tls.VersionTLS10, tls.VersionTLS11} {
		c := client.Clone()
		c.MinVersion, c.MaxVersion = v, v
		if name, err := dial(addr, c); err == nil {
			t.Errorf("%s: handshake succeeded (server %q), want it refused", tls.VersionName(v), name)
		}
	}
	// A client that does not trust the server's CA refuses it.
	if _, err := dial(addr, &tls.Config{RootCAs: tlstest.NewCA(t, "other").Pool()}); err == nil {
		t.Error("a client trusting another CA completed the handshake")
	}
}

func TestRotationWithoutRestart(t *testing.T) {
	f, files := newFixture(t, nil)
	r := open(t, files)
	addr := serve(t, r)
	client := f.ClientConfig(nil)
	if name, err := dial(addr, client); err != nil || name != "server-1" {
		t.Fatalf("before rotation: %q, %v", name, err)
	}

	f.Rotate(t, "server-2")
	eventually(t, "the rotated certificate served", func() bool {
		name, err := dial(addr, client)
		return err == nil && name == "server-2"
	})

	// A broken rotation (a key that is not the certificate's) keeps the
	// pair in use; a later good one is picked up.
	_, otherKey := f.CA.Server(t, "unused")
	tlstest.Replace(t, f.KeyFile, otherKey)
	eventually(t, "the broken rotation noticed", func() bool {
		_, _ = dial(addr, client)
		return r.Stats().Failures > 0
	})
	if name, err := dial(addr, client); err != nil || name != "server-2" {
		t.Fatalf("after a broken rotation: %q, %v; want server-2 still", name, err)
	}
	f.Rotate(t, "server-3")
	eventually(t, "the certificate after a broken rotation served", func() bool {
		name, err := dial(addr, client)
		return err == nil && name == "server-3"
	})
	if s := r.Stats(); s.Reloads < 2 || s.Failures < 1 {
		t.Errorf("stats %+v, want at least 2 reloads and 1 failure", s)
	}
}

// TestAFixThatLooksUnchangedIsRead: files that changed but could not be
// used are read again at every look until they can, though the fix leaves
// what a look compares as it was. Here a rotation writes the new
// certificate first and its key later, in place, at the same size and
// modification time as the old key (a file system with coarse times, a
// tool that keeps them): the key's write looked like no change, and the
// old certificate stayed in use until a later change, past its expiry if
// none came. The failure is counted (and logged) once, not at every look.
func TestAFixThatLooksUnchangedIsRead(t *testing.T) {
	f, files := newFixture(t, nil)
	r := open(t, files)
	addr := serve(t, r)
	client := f.ClientConfig(nil)
	if name, err := dial(addr, client); err != nil || name != "server-1" {
		t.Fatalf("before rotation: %q, %v", name, err)
	}
	oldKey, err := os.Stat(f.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM := f.CA.Server(t, "server-2")
	if err := os.WriteFile(f.CertFile, certPEM, 0o600); err != nil { // in place; its key is not there yet
		t.Fatal(err)
	}
	eventually(t, "the certificate without its key refused", func() bool {
		_, _ = dial(addr, client)
		return r.Stats().Failures > 0
	})
	if name, err := dial(addr, client); err != nil || name != "server-1" {
		t.Fatalf("while the key is missing: %q, %v; want server-1 still", name, err)
	}
	if int64(len(keyPEM)) != oldKey.Size() {
		t.Fatalf("the new key has %d bytes, the old %d: the fixture cannot make the key's write look unchanged", len(keyPEM), oldKey.Size())
	}
	if err := os.WriteFile(f.KeyFile, keyPEM, 0o600); err != nil { // in place: the same file
		t.Fatal(err)
	}
	if err := os.Chtimes(f.KeyFile, oldKey.ModTime(), oldKey.ModTime()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the certificate served once its key is there", func() bool {
		name, err := dial(addr, client)
		return err == nil && name == "server-2"
	})
	if s := r.Stats(); s.Failures != 1 || s.Reloads != 1 {
		t.Errorf("stats %+v, want 1 failure (counted once, not per look) and 1 reload", s)
	}
}

func TestClientCertificateRequired(t *testing.T) {
	clientCA := tlstest.NewCA(t, "client-ca")
	f, files := newFixture(t, clientCA)
	r := open(t, files)
	if !r.MutualTLS() {
		t.Fatal("MutualTLS() = false with a client CA")
	}
	addr := serve(t, r)
	with := f.ClientConfig
	good := clientCA.Client(t, "producer")
	stranger := tlstest.NewCA(t, "stranger-ca").Client(t, "stranger")

	if _, err := dial(addr, with(&good)); err != nil {
		t.Fatalf("a client certificate of the client CA was refused: %v", err)
	}
	if _, err := dial(addr, with(nil)); err == nil {
		t.Error("a client without a certificate was served")
	}
	if _, err := dial(addr, with(&stranger)); err == nil {
		t.Error("a client certificate of another CA was served")
	}

	// Rotating the client CA: the old CA's clients are refused, the new
	// one's served, without a restart.
	newClientCA := tlstest.NewCA(t, "client-ca-2")
	next := newClientCA.Client(t, "producer-2")
	tlstest.Replace(t, f.ClientCAFile, newClientCA.PEM)
	eventually(t, "the rotated client CA in use", func() bool {
		_, err := dial(addr, with(&next))
		return err == nil
	})
	if _, err := dial(addr, with(&good)); err == nil {
		t.Error("a client of the replaced CA was served after the rotation")
	}
}

func TestNewRefusesUnusableFiles(t *testing.T) {
	dir := t.TempDir()
	f := tlstest.WriteServer(t, dir, "server-1", nil)
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, files := range map[string]Files{
		"no key":          {CertFile: f.CertFile},
		"missing cert":    {CertFile: filepath.Join(dir, "missing"), KeyFile: f.KeyFile},
		"key not PEM":     {CertFile: f.CertFile, KeyFile: garbage},
		"client CA empty": {CertFile: f.CertFile, KeyFile: f.KeyFile, ClientCAFile: garbage},
		"client CA gone":  {CertFile: f.CertFile, KeyFile: f.KeyFile, ClientCAFile: filepath.Join(dir, "missing")},
	} {
		if _, err := New(files, nil); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
}
