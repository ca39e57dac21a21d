package admin

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/wowd/wowd/internal/tlsconf"
	"github.com/wowd/wowd/internal/tlsconf/tlstest"
)

// TestMutualTLS: over mutual TLS, a client certificate verified in the
// handshake authenticates a request that no loopback rule would let
// through (addressed to a host name); a client without one does not get
// past the handshake.
func TestMutualTLS(t *testing.T) {
	operators := tlstest.NewCA(t, "operators")
	files := tlstest.WriteServer(t, t.TempDir(), "127.0.0.1", operators)
	rl, err := tlsconf.New(tlsconf.Files{CertFile: files.CertFile, KeyFile: files.KeyFile, ClientCAFile: files.ClientCAFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := &fakeParked{}
	s, err := New("127.0.0.1:0", Options{Source: newFakeSource(), Parked: p, TLS: rl.Config(), ClientCerts: rl.MutualTLS()})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := s.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	}()
	post := func(cert bool) (*http.Response, error) {
		cfg := files.ClientConfig(nil)
		if cert {
			c := operators.Client(t, "alice")
			cfg = files.ClientConfig(&c)
		}
		tr := &http.Transport{TLSClientConfig: cfg}
		defer tr.CloseIdleConnections()
		req, err := http.NewRequest("POST", "https://"+s.Addr()+"/admin/v1/dispatchers/proj/aggregates/cart-9/redrive", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "wowd.internal:9465"
		return (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
	}
	resp, err := post(true)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || len(p.done) != 1 {
		t.Errorf("with a client certificate: %s, actions %v", resp.Status, p.done)
	}
	if resp, err := post(false); err == nil {
		resp.Body.Close()
		t.Errorf("without a client certificate: %s", resp.Status)
	}
}
