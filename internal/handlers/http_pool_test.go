package handlers

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/testwait"
)

// TestHTTPDefaultConcurrencyFollowsTheWindow checks that a sink left at its
// default concurrency has no limit of its own: every message it is given
// has its request in flight at once (a receiver's window bounds them), and
// the connections they opened are all kept and reused by the next ones.
func TestHTTPDefaultConcurrencyFollowsTheWindow(t *testing.T) {
	const n = 150 // more than the former default of 64
	var inFlight, conns atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inFlight.Add(1)
		defer inFlight.Add(-1)
		hang(r, release)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	h := build(t, "http", sinkConfig(srv.URL, nil), handler.Deps{})

	acks := newAcks(t)
	round := func(first int64, hold bool) {
		for off := first; off < first+n; off++ {
			h.Handle(context.Background(), testMessage(off), acks.ack(off))
		}
		if hold {
			testwait.For(t, 10*time.Second, "every request in flight at once", func() bool { return inFlight.Load() == n })
			close(release)
		}
		for off := first; off < first+n; off++ {
			if err := acks.wait(t, off); err != nil {
				t.Fatalf("offset %d: %v", off, err)
			}
		}
	}
	round(0, true)
	opened := conns.Load()
	if opened < n {
		t.Fatalf("%d connections for %d requests at once", opened, n)
	}
	for r := range int64(3) { // as many at once again: no connection was closed for want of room
		round((r+1)*n, false)
	}
	if c := conns.Load(); c > opened+n/10 {
		t.Errorf("%d connections opened after the first %d, for %d more requests", c-opened, opened, 3*n)
	}
}

// TestHTTPH2C checks that h2c speaks HTTP/2 without TLS to an http URL,
// and that a sink without it speaks HTTP/1.1 there.
func TestHTTPH2C(t *testing.T) {
	var protos atomic.Value
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		protos.Store(r.Proto)
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		h2c  bool
		want string
	}{{true, "HTTP/2.0"}, {false, "HTTP/1.1"}} {
		h := build(t, "http", sinkConfig(srv.URL, map[string]any{"h2c": tc.h2c, "max-attempts": 1}), handler.Deps{})
		acks := newAcks(t)
		for off := range int64(5) {
			h.Handle(context.Background(), testMessage(off), acks.ack(off))
		}
		for off := range int64(5) {
			if err := acks.wait(t, off); err != nil {
				t.Fatalf("h2c %v, offset %d: %v", tc.h2c, off, err)
			}
		}
		if p := protos.Load(); p != tc.want {
			t.Errorf("h2c %v: protocol %v, want %v", tc.h2c, p, tc.want)
		}
	}
}

// TestHTTPH2CToAnHTTP1Server checks that h2c against a server that speaks
// only HTTP/1.1 fails the message transiently, naming the sink's URL.
func TestHTTPH2CToAnHTTP1Server(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
	h := build(t, "http", sinkConfig(srv.URL, map[string]any{"h2c": true, "max-attempts": 1}), handler.Deps{})
	acks := newAcks(t)
	h.Handle(context.Background(), testMessage(0), acks.ack(0))
	err := acks.wait(t, 0)
	if err == nil {
		t.Fatal("no error")
	}
	wantClass(t, err, handler.Transient)
}

// workerCount returns how many workers the sink has, and how many idle.
func (s *httpSink) workerCount() (all, idle int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.all), len(s.idle)
}

// TestHTTPWorkersAreReusedAndStopWhenIdle: an attempt goes to an idle
// worker when there is one, a new worker is started only when all are
// busy, and workers idle for a while stop.
func TestHTTPWorkersAreReusedAndStopWhenIdle(t *testing.T) {
	release := make(chan struct{})
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if off, _ := strconv.Atoi(r.Header.Get("kafka-offset")); off >= 100 && off < 200 {
			hang(r, release)
		}
	})
	s := build(t, "http", sinkConfig(srv.URL, nil), handler.Deps{}).(*httpSink)
	s.mu.Lock()
	s.idleFor = 200 * time.Millisecond
	s.mu.Unlock()
	acks := newAcks(t)
	for off := range int64(20) { // one at a time
		s.Handle(context.Background(), testMessage(off), acks.ack(off))
		if err := acks.wait(t, off); err != nil {
			t.Fatalf("offset %d: %v", off, err)
		}
		testwait.For(t, 10*time.Second, "the worker idle", func() bool { _, idle := s.workerCount(); return idle == 1 })
	}
	if all, _ := s.workerCount(); all != 1 {
		t.Fatalf("%d workers for one attempt at a time", all)
	}
	for off := range int64(10) { // ten at once: the idle worker and nine new ones
		s.Handle(context.Background(), testMessage(100+off), acks.ack(100+off))
	}
	testwait.For(t, 10*time.Second, "ten workers busy", func() bool { all, idle := s.workerCount(); return all == 10 && idle == 0 })
	close(release)
	for off := range int64(10) {
		if err := acks.wait(t, 100+off); err != nil {
			t.Fatalf("offset %d: %v", 100+off, err)
		}
	}
	testwait.For(t, 10*time.Second, "the idle workers stopped", func() bool { all, _ := s.workerCount(); return all == 0 })
	s.Handle(context.Background(), testMessage(200), acks.ack(200)) // a new worker again
	if err := acks.wait(t, 200); err != nil {
		t.Fatal(err)
	}
}

// TestHTTPMaxConcurrencyKeepsOrder: at the limit, attempts wait in the
// order they came and go to the workers that end theirs.
func TestHTTPMaxConcurrencyKeepsOrder(t *testing.T) {
	var mu sync.Mutex
	var order []string
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		order = append(order, r.Header.Get("kafka-offset"))
		mu.Unlock()
		time.Sleep(time.Millisecond)
	})
	s := build(t, "http", sinkConfig(srv.URL, map[string]any{"max-concurrency": 1}), handler.Deps{}).(*httpSink)
	acks := newAcks(t)
	const n = 30
	for off := range int64(n) {
		s.Handle(context.Background(), testMessage(off), acks.ack(off))
	}
	for off := range int64(n) {
		if err := acks.wait(t, off); err != nil {
			t.Fatalf("offset %d: %v", off, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, got := range order {
		if got != strconv.Itoa(i) {
			t.Fatalf("requests in the order %v", order)
		}
	}
	if all, _ := s.workerCount(); all != 1 {
		t.Errorf("%d workers with max-concurrency 1", all)
	}
}
