package handlers

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/handlerconfig"
)

// TestLimiter counts on a fake clock: n requests at once at r/s with burst
// b wait (k-b)/r each, the last (n-b)/r; after a quiet period the burst is
// back.
func TestLimiter(t *testing.T) {
	for _, tc := range []struct {
		rate  float64
		burst int
	}{{10, 1}, {10, 4}, {0.5, 2}, {1000, 100}} {
		l := newLimiter(tc.rate, tc.burst)
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		interval := time.Duration(float64(time.Second) / tc.rate)
		const n = 250
		for k := 1; k <= n; k++ {
			want := time.Duration(max(k-tc.burst, 0)) * interval
			if got := l.reserve(t0); got != want {
				t.Fatalf("rate %v burst %d: request %d waits %v, want %v", tc.rate, tc.burst, k, got, want)
			}
		}
		// Quiet until every reservation is due and the bucket refilled.
		later := t0.Add(time.Duration(n+tc.burst) * interval)
		for k := 1; k <= tc.burst; k++ {
			if got := l.reserve(later); got != 0 {
				t.Fatalf("rate %v burst %d: after a quiet period request %d waits %v", tc.rate, tc.burst, k, got)
			}
		}
		if got := l.reserve(later); got != interval {
			t.Fatalf("rate %v burst %d: past the burst: %v, want %v", tc.rate, tc.burst, got, interval)
		}
	}
	// Steady requests at the rate never wait.
	l := newLimiter(100, 1)
	t0 := time.Now()
	for k := range 100 {
		if got := l.reserve(t0.Add(time.Duration(k) * 10 * time.Millisecond)); got != 0 {
			t.Fatalf("request %d at the rate waits %v", k, got)
		}
	}
}

// TestHTTPRateLimit sends n messages at once through a sink limited to r/s
// with burst b: they take at least (n-b)/r, and the server never sees more
// than b+r×t requests in a window of t.
func TestHTTPRateLimit(t *testing.T) {
	const (
		n     = 30
		rate  = 50.0
		burst = 5
	)
	var arrived arrivals
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) { arrived.add() })
	h := build(t, "http", sinkConfig(srv.URL, map[string]any{
		"rate-limit": rate, "rate-burst": burst, "max-concurrency": 8,
	}), handler.Deps{})
	acks := newAcks(t)
	began := time.Now()
	for off := range int64(n) {
		h.Handle(context.Background(), testMessage(off), acks.ack(off))
	}
	// Waiting for the limiter would take (n-burst)/rate = 500ms.
	if d := time.Since(began); d > 250*time.Millisecond {
		t.Errorf("Handle took %v: it must not wait for the limiter", d)
	}
	for off := range int64(n) {
		if err := acks.wait(t, off); err != nil {
			t.Fatalf("offset %d: %v", off, err)
		}
	}
	took := time.Since(began)
	if lower := time.Duration(float64(n-burst) / rate * float64(time.Second)); took < lower*9/10 {
		t.Errorf("%d requests at %v/s with burst %d took %v, want at least %v", n, rate, burst, took, lower)
	}
	if took > 5*time.Second {
		t.Errorf("took %v", took)
	}
	at := arrived.times()
	// In any window from one request to a later one, at most burst + rate×window
	// requests, with 50ms of slack (two more requests) for scheduling: the
	// first burst may reach the server late, behind new connections, and
	// bunch with the next ones. A burst of 8 or more in no time still fails.
	for i := range at {
		for j := i + burst; j < len(at); j++ {
			window := at[j].Sub(at[i]) + 50*time.Millisecond
			if allowed := burst + int(rate*window.Seconds()); j-i+1 > allowed {
				t.Fatalf("%d requests within %v, allowed %d", j-i+1, window, allowed)
			}
		}
	}
}

// TestHTTPRateLimitWaitEnds checks that a call waiting for the limiter is
// acknowledged at once when its context is canceled or the sink closed.
func TestHTTPRateLimitWaitEnds(t *testing.T) {
	var requests atomic.Int32
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) { requests.Add(1) })
	spec, _ := handler.Default().Lookup("http")
	cfg, err := handlerconfig.Decode(spec, sinkConfig(srv.URL, map[string]any{"rate-limit": 0.001, "max-concurrency": 3}))
	if err != nil {
		t.Fatal(err)
	}
	h, err := spec.New(cfg, handler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	acks := newAcks(t)
	send := func(ctx context.Context, off int64) { h.Handle(ctx, testMessage(off), acks.ack(off)) }
	send(context.Background(), 0) // takes the only token for 1000s
	if err := acks.wait(t, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	send(ctx, 1)
	send(context.Background(), 2)
	send(context.Background(), 3) // queued: two workers wait for the limiter
	time.Sleep(50 * time.Millisecond)
	began := time.Now()
	cancel()
	if err := acks.wait(t, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled while waiting: %v", err)
	}
	if err := h.(handler.Closer).Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{2, 3} {
		if err := acks.wait(t, off); !errors.Is(err, context.Canceled) {
			t.Errorf("offset %d at close: %v", off, err)
		}
	}
	if d := time.Since(began); d > time.Second {
		t.Errorf("took %v", d)
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}
