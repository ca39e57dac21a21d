package admin

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wowd/wowd/internal/bearer"
)

// tokenFile opens a bearer token file holding "s3cret".
func tokenFile(t *testing.T) *bearer.File {
	t.Helper()
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tok, err := bearer.Open(file, "admin", nil)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// A request announcing a body that never comes is answered at once and its
// connection closed. A client without the token sent the headers of a POST
// with a small body and held it back: the guard refused it, but net/http
// first read what was left of the body, with no deadline on the admin
// listener, so the 401 was never written and the connection and its
// goroutine were held for as long as the client liked. No admin request
// takes a body. Found by review.
func TestARequestWithABodyIsAnsweredWithoutReadingIt(t *testing.T) {
	p := &fakeParked{}
	s, err := New("127.0.0.1:0", Options{Source: newFakeSource(), Parked: p, Token: tokenFile(t)})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = s.Shutdown(ctx)
	}()
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Write([]byte("POST /admin/v1/dispatchers/proj/aggregates/cart-9/discard HTTP/1.1\r\n" +
		"Host: 127.0.0.1\r\nContent-Length: 10\r\n\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("a POST whose body never comes got no answer within 3 s: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !resp.Close {
		t.Errorf("status %s, closing %v: want 413 and the connection closed", resp.Status, resp.Close)
	}
}

// Idle keep-alive connections of the admin listener (an unauthenticated
// client's included) are closed in the end, as the metrics and ingest
// listeners' are; it set no IdleTimeout. Found by review.
func TestAdminClosesIdleConnections(t *testing.T) {
	s, _ := testServer(t, Options{})
	if s.srv.IdleTimeout <= 0 && s.srv.ReadTimeout <= 0 {
		t.Errorf("admin http.Server: IdleTimeout %v, ReadTimeout %v: idle keep-alive connections are never closed", s.srv.IdleTimeout, s.srv.ReadTimeout)
	}
}

// The page offers its form to park an aggregate by hand with
// wow.admin.token-file set. A browser loads the page without the token,
// and the form was rendered only for an authorized request, outside the
// part the script refreshes: it never appeared. Found by review.
func TestParkFormOfferedWithAToken(t *testing.T) {
	s, _ := testServer(t, Options{Parked: &fakeParked{}, Token: tokenFile(t)})
	page := do(s, "GET", "/admin/", local).Body.String() // what the browser loads
	part := do(s, "GET", "/admin/?part=body", local, "Authorization", "Bearer s3cret").Body.String()
	if !strings.Contains(page, `id="park-form"`) && !strings.Contains(part, `id="park-form"`) {
		t.Errorf("with a token the page never offers the park-by-hand form (neither the page nor its refreshed part holds id=\"park-form\")")
	}
}
