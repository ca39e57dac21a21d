package metrics

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check reports whether a component is ready, and if not, why.
type Check func() (ok bool, reason string)

// Server serves /metrics, /healthz and /readyz.
//
// /healthz answers 200 while the process is running (liveness).
// /readyz answers 200 once every readiness check passes, else 503 with the
// reasons, one per line.
type Server struct {
	srv *http.Server
	ln  net.Listener
	mux *http.ServeMux
	err chan error // receives Serve's result once
}

// NewServer binds listen (host:port) for m and ready. It does not serve until
// Start.
func NewServer(listen string, m *Metrics, ready Check) (*Server, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ok, reason := ready(); !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintln(w, reason)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return &Server{
		// IdleTimeout: idle keep-alive connections are not held for good.
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute},
		ln:  ln,
		mux: mux,
		err: make(chan error, 1),
	}, nil
}

// Addr returns the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// ErrorLog sends the server's own errors (a failed TLS handshake, a
// broken connection) to l instead of the standard logger. Call it before
// Start.
func (s *Server) ErrorLog(l *log.Logger) { s.srv.ErrorLog = l }

// UseTLS makes the server speak TLS with cfg (see internal/tlsconf). Call
// it before Start.
func (s *Server) UseTLS(cfg *tls.Config) { s.ln = tls.NewListener(s.ln, cfg) }

// Handle adds a handler on the same listener (for example an ingest
// endpoint). Call it before Start.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// Start serves in a goroutine owned by the server until Shutdown.
func (s *Server) Start() {
	go func() {
		err := s.srv.Serve(s.ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.err <- err
	}()
}

// Shutdown stops serving, waiting for open requests until ctx is done;
// the connections still open then are closed, which is how a stop ends a
// stalled client, not a failure (closed reports it). It returns the
// serving goroutine's error, if any.
func (s *Server) Shutdown(ctx context.Context) (closed bool, err error) {
	if s.srv.Shutdown(ctx) != nil {
		_ = s.srv.Close()
		closed = true
	}
	return closed, <-s.err
}
