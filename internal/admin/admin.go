// Package admin serves wowd's admin API and status page on a listener of
// its own (wow.admin.listen):
//
//   - GET /admin/v1/status: the instance, its receivers and partitions,
//     why they are paused, outcome rates, the executor, and the hot and
//     oldest aggregates by name (JSON, see Status);
//   - GET /admin/: the same as a page for people, refreshed by a small
//     script, with the parked aggregates' action buttons;
//   - POST /admin/v1/dispatchers/{d}/aggregates/{id}/{park|redrive|skip|discard}:
//     the parked-aggregate actions, by a Parked implementation (501 while
//     none is wired).
//
// # Access
//
// With a bearer token (wow.admin.token-file) every request must carry it,
// reads included: aggregate IDs are business data. With mutual TLS
// (wow.admin.tls.client-ca-file) a client certificate verified in the
// handshake authenticates a request that has no token configured. Without
// either (allowed only on a loopback listener) anyone on the machine may
// read, and a mutating request is served only from a loopback address. Either way,
// cross-origin browser requests that would change something are refused
// (http.CrossOriginProtection), and without a token a request whose Host is
// not a loopback name is refused too, so that a web page cannot reach the
// listener through a DNS name rebound to 127.0.0.1.
//
// Actions are logged at info level with their outcome (action, dispatcher,
// aggregate, remote address, status); refused requests at warn; reads at
// debug, since the page asks every few seconds.
//
// # Goroutines and locks
//
// A Server owns its serving goroutine and its sampler (see tracker), both
// ended by Shutdown. tracker.mu guards the samples and the partitions'
// progress; it is taken after Source calls return, never around them.
package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/wowd/wowd/internal/bearer"
	"github.com/wowd/wowd/internal/loopback"
)

// Options configure a Server.
type Options struct {
	Instance string    // names this process: the host name (a pod's name)
	Service  string    // wow.service
	Version  string    // the build's version
	Started  time.Time // when the process started
	Source   Source
	// Parked acts on parked aggregates; nil answers the actions with 501.
	Parked Parked
	// Token, when set, is required of every request.
	Token *bearer.File
	// TLS, when set, makes the listener speak TLS (see internal/tlsconf).
	TLS *tls.Config
	// ClientCerts says the TLS handshake requires client certificates
	// (mutual TLS): a client that completed it is authenticated.
	ClientCerts bool
	Log         *zap.Logger
	// SampleEvery is how often the sampler records outcome counts and
	// partition progress (default 5s).
	SampleEvery time.Duration
}

// Server is the admin listener.
type Server struct {
	o     Options
	log   *zap.Logger
	srv   *http.Server
	ln    net.Listener
	track *tracker

	stop    chan struct{} // closed by Shutdown: ends the sampler
	sampled chan struct{} // closed when the sampler returned
	err     chan error    // receives Serve's result once
	started bool
}

// New binds listen (host:port). Nothing is served until Start.
func New(listen string, o Options) (*Server, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("admin listener: %w", err)
	}
	return newServer(ln, o), nil
}

func newServer(ln net.Listener, o Options) *Server {
	if o.TLS != nil {
		ln = tls.NewListener(ln, o.TLS)
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.SampleEvery <= 0 {
		o.SampleEvery = 5 * time.Second
	}
	if o.Started.IsZero() {
		o.Started = time.Now()
	}
	s := &Server{
		o:       o,
		log:     o.Log,
		ln:      ln,
		track:   newTracker(o.Started),
		stop:    make(chan struct{}),
		sampled: make(chan struct{}),
		err:     make(chan error, 1),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/{$}", s.page)
	mux.HandleFunc("GET /admin/v1/status", s.status)
	mux.HandleFunc("POST /admin/v1/dispatchers/{dispatcher}/aggregates/{id}/{action}", s.act)
	mux.HandleFunc("GET /admin", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/admin/", http.StatusMovedPermanently)
	})
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.refuse(w, r, http.StatusForbidden, "cross-origin requests that change something are refused")
	}))
	s.srv = &http.Server{
		Handler:           s.guard(cop.Handler(mux)),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute, // idle keep-alive connections are not held for good
		ErrorLog:          zap.NewStdLog(o.Log),
	}
	return s
}

// Addr returns the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Start serves, and samples every SampleEvery, until Shutdown.
func (s *Server) Start() {
	s.started = true
	go func() {
		err := s.srv.Serve(s.ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.err <- err
	}()
	go s.sample()
}

// Shutdown stops serving, waiting for open requests until ctx is done;
// the connections still open then are closed, which is how a stop ends a
// stalled client, not a failure (closed reports it). It returns the
// serving goroutine's error, if any.
func (s *Server) Shutdown(ctx context.Context) (closed bool, err error) {
	if !s.started {
		return false, s.ln.Close()
	}
	close(s.stop)
	<-s.sampled
	if s.srv.Shutdown(ctx) != nil {
		_ = s.srv.Close()
		closed = true
	}
	return closed, <-s.err
}

// sample records outcome counts and partition progress every SampleEvery,
// so rates and stall durations do not depend on someone asking.
func (s *Server) sample() {
	defer close(s.sampled)
	t := time.NewTicker(s.o.SampleEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.snapshot(0)
		}
	}
}

// guard applies the access rules of the package documentation before any
// handler runs.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 { // -1: a body of unknown length
			// No admin request takes a body. Answered without reading it,
			// and the connection closed: net/http would otherwise read
			// what is left of a small body before answering, with no
			// deadline, for as long as a client holds it back.
			w.Header().Set("Connection", "close")
			s.refuse(w, r, http.StatusRequestEntityTooLarge, "admin requests take no body")
			return
		}
		mutating := r.Method != http.MethodGet && r.Method != http.MethodHead
		switch {
		case s.o.Token != nil:
			if !s.o.Token.Allows(r) {
				if r.Method == http.MethodGet && (r.URL.Path == "/admin/" || r.URL.Path == "/admin") && r.URL.Query().Get("part") == "" {
					// The page itself (or the redirect to it), for a
					// browser that cannot send the header yet: it asks
					// for the token, and its script fetches the rest with
					// it.
					next.ServeHTTP(w, r)
					return
				}
				s.refuse(w, r, http.StatusUnauthorized, "a bearer token is required (Authorization: Bearer <token>, the content of wow.admin.token-file); this one is missing or wrong")
				return
			}
		case s.o.ClientCerts && r.TLS != nil && len(r.TLS.VerifiedChains) > 0:
			// Authenticated by its certificate in the handshake.
		case !loopback.Host(r.Host):
			s.refuse(w, r, http.StatusForbidden, "without wow.admin.token-file the admin listener answers only requests addressed to a loopback host (127.0.0.1, ::1, localhost)")
			return
		case mutating && !loopback.Remote(r.RemoteAddr):
			s.refuse(w, r, http.StatusForbidden, "without wow.admin.token-file only loopback clients may change anything")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// authorized reports whether the request may see the data (used by the
// page, which the guard lets through without the token).
func (s *Server) authorized(r *http.Request) bool {
	return s.o.Token == nil || s.o.Token.Allows(r)
}

func (s *Server) refuse(w http.ResponseWriter, r *http.Request, code int, msg string) {
	s.log.Warn("admin request refused", zap.String("method", r.Method), zap.String("path", r.URL.Path),
		zap.String("remote", r.RemoteAddr), zap.Int("status", code))
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="wowd admin"`)
	}
	writeError(w, code, msg)
}
