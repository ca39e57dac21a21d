package ingest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/wowd/wowd/internal/bearer"
)

// serve serves in on a listener of its own on 127.0.0.1, set up as the
// daemon sets up the ingest listener's server; it returns the address.
func serve(t *testing.T, in *Ingest) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(Path, in)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close() // ends Serve and the connections still open
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serving: %v", err)
		}
	})
	return ln.Addr().String()
}

// trickle sends the head of a request, then its body a byte every 20 ms,
// until the server ends the connection or bound passed. It returns how
// long after the head the connection ended, what the server answered
// before that, and whether it ended within bound.
func trickle(t *testing.T, addr, head string, bound time.Duration) (time.Duration, []byte, bool) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(head)); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	stop := make(chan struct{})
	wrote := make(chan struct{})
	go func() { // ends with stop, or when the server refuses more bytes
		defer close(wrote)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	defer func() { close(stop); <-wrote }()

	_ = conn.SetReadDeadline(began.Add(bound))
	var got bytes.Buffer
	buf := make([]byte, 4096)
	for {
		n, err := conn.Read(buf)
		got.Write(buf[:n])
		if err == nil {
			continue
		}
		if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
			return time.Since(began), got.Bytes(), false // our deadline: still open
		}
		return time.Since(began), got.Bytes(), true // closed (EOF) or reset by the server
	}
}

// TestRefusedCallerTricklingItsBodyIsCutOff: a caller announces a body
// of 100 kB (under the 256 KiB that net/http reads, after the handler
// returned, of a body it left, to reuse the connection) or a chunked one,
// then trickles it, a byte every 20 ms. Whether it is refused before its
// body is read (401 without the token or with a wrong one, 404, 405, 429,
// 503 busy or stopping) or its body is read, the server must end the
// connection about bodyTimeout after the request came in, and a request
// whose body it was reading must have left its slot of max-in-flight by
// then. (Found by review: the read deadline was set only just before the
// body was read, and the servers set no ReadTimeout; a refused caller held
// its connection, and a goroutine, for as long as it kept trickling.)
func TestRefusedCallerTricklingItsBodyIsCutOff(t *testing.T) {
	const body = 250 * time.Millisecond
	const bound = 3 * time.Second // 12 × bodyTimeout: room for a busy machine
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("t0ken"), 0o600); err != nil {
		t.Fatal(err)
	}
	tok, err := bearer.Open(file, "ingest", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		method   string
		kind     string
		auth     string
		chunked  bool
		setUp    func(*testing.T, *Ingest)
		answered string // the status line, when the answer comes before the close
		held     int    // requests under way once the connection ended: those setUp counted in
	}{
		// Not refused: read until the deadline; its slot of max-in-flight
		// is free again once the connection ended.
		{name: "admitted, stalled in its body", method: "POST", kind: "event", auth: "Bearer t0ken", answered: "HTTP/1.1 400"},
		{name: "no token", method: "POST", kind: "event", answered: "HTTP/1.1 401"},
		{name: "wrong token", method: "POST", kind: "event", auth: "Bearer wrong", answered: "HTTP/1.1 401"},
		{name: "wrong token, chunked", method: "POST", kind: "event", auth: "Bearer wrong", chunked: true, answered: "HTTP/1.1 401"},
		{name: "not a POST", method: "PUT", kind: "event", auth: "Bearer t0ken", answered: "HTTP/1.1 405"},
		{name: "unknown kind", method: "POST", kind: "nope", auth: "Bearer t0ken", answered: "HTTP/1.1 404"},
		{name: "rate limited", method: "POST", kind: "event", auth: "Bearer t0ken", answered: "HTTP/1.1 429",
			setUp: func(_ *testing.T, in *Ingest) { in.Rate = rate.NewLimiter(0, 0) }},
		{name: "stopping", method: "POST", kind: "event", auth: "Bearer t0ken", answered: "HTTP/1.1 503",
			setUp: func(_ *testing.T, in *Ingest) { in.Stop() }},
		{name: "busy", method: "POST", kind: "event", auth: "Bearer t0ken", answered: "HTTP/1.1 503",
			setUp: func(t *testing.T, in *Ingest) {
				in.MaxInFlight = 1
				if _, e := in.enter(); e != entered { // the one slot is taken
					t.Fatalf("entering: %d", e)
				}
				t.Cleanup(in.leave)
			}, held: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			in, _ := newIngest(&producer{})
			in.Token = tok
			in.bodyTimeout = body
			if c.setUp != nil {
				c.setUp(t, in)
			}
			addr := serve(t, in)
			head := fmt.Sprintf("%s %s%s HTTP/1.1\r\nHost: wowd\r\nContent-Type: application/json\r\n", c.method, Path, c.kind)
			if c.auth != "" {
				head += "Authorization: " + c.auth + "\r\n"
			}
			if c.chunked {
				head += "Transfer-Encoding: chunked\r\n\r\n186a0\r\n" // one chunk of 100 kB
			} else {
				head += "Content-Length: 100000\r\n\r\n"
			}
			took, got, closed := trickle(t, addr, head, bound)
			if !closed {
				t.Fatalf("the connection was still open %v after the head (bodyTimeout %v); answered %q", took, body, got)
			}
			t.Logf("closed %v after the head; answered %q", took.Round(time.Millisecond), firstLine(got))
			if len(got) > 0 && !bytes.HasPrefix(got, []byte(c.answered)) {
				t.Errorf("answered %q, want %s", firstLine(got), c.answered)
			}
			in.mu.Lock()
			held := in.requests
			in.mu.Unlock()
			if held != c.held {
				t.Errorf("%d requests under way once the connection ended, want %d", held, c.held)
			}
		})
	}
}

func firstLine(b []byte) []byte {
	line, _, _ := bytes.Cut(b, []byte("\r\n"))
	return line
}
