package handlers

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
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
			if got, _ := l.reserve(t0); got != want {
				t.Fatalf("rate %v burst %d: request %d waits %v, want %v", tc.rate, tc.burst, k, got, want)
			}
		}
		// Quiet until every reservation is due and the bucket refilled.
		later := t0.Add(time.Duration(n+tc.burst) * interval)
		for k := 1; k <= tc.burst; k++ {
			if got, _ := l.reserve(later); got != 0 {
				t.Fatalf("rate %v burst %d: after a quiet period request %d waits %v", tc.rate, tc.burst, k, got)
			}
		}
		if got, _ := l.reserve(later); got != interval {
			t.Fatalf("rate %v burst %d: past the burst: %v, want %v", tc.rate, tc.burst, got, interval)
		}
	}
	// Steady requests at the rate never wait.
	l := newLimiter(100, 1)
	t0 := time.Now()
	for k := range 100 {
		if got, _ := l.reserve(t0.Add(time.Duration(k) * 10 * time.Millisecond)); got != 0 {
			t.Fatalf("request %d at the rate waits %v", k, got)
		}
	}
}

// TestLimiterGivesSlotsBack: slots given back are taken again, first the
// earliest, and the schedule moves back when the last ones go; whatever the
// order of reservations and give-ups, the requests made keep to the rate
// and burst (each at a slot the algorithm handed out, none twice).
func TestLimiterGivesSlotsBack(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const iv = 100 * time.Millisecond
	l := newLimiter(10, 1)
	var slots []slot
	for range 40 {
		_, at := l.reserve(t0)
		slots = append(slots, at)
	}
	// The tries of 1s give up: all but the first ten, in no particular order.
	for _, k := range []int{25, 11, 39, 10, 30, 38, 12, 20} {
		l.cancel(slots[k], t0.Add(time.Second))
	}
	for k := 13; k < 40; k++ {
		if !slices.Contains([]int{25, 39, 30, 38, 20}, k) {
			l.cancel(slots[k], t0.Add(time.Second))
		}
	}
	// Everything after t0+1.2s was given back: the schedule is back there.
	if got, at := l.reserve(t0.Add(1500 * time.Millisecond)); got != 0 || !at.at.Equal(t0.Add(1500*time.Millisecond)) {
		t.Fatalf("a request 1.5s in, with every later slot given back, waits %v for %v", got, at.at.Sub(t0))
	}
	// A hole before the end is taken first; one whose time passed is not.
	l = newLimiter(10, 1)
	slots = slots[:0]
	for range 5 {
		_, at := l.reserve(t0)
		slots = append(slots, at)
	}
	l.cancel(slots[1], t0) // 100ms
	l.cancel(slots[3], t0) // 300ms
	if got, at := l.reserve(t0.Add(150 * time.Millisecond)); !at.at.Equal(slots[3].at) || got != 150*time.Millisecond {
		t.Fatalf("after the 100ms hole passed: slot %v, wait %v; want the 300ms hole, 150ms", at.at.Sub(t0), got)
	}
	if _, at := l.reserve(t0.Add(150 * time.Millisecond)); !at.at.Equal(t0.Add(5 * iv)) {
		t.Fatalf("with no hole left: slot %v, want the end of the schedule, 500ms", at.at.Sub(t0))
	}

}

// TestLimiterKeepsRateWithGiveUps: random reservations and give-ups (more
// waiting than the rate serves): the requests made, at their slots, never
// exceed burst at once nor burst + rate×window in any window, and use the
// rate.
func TestLimiterKeepsRateWithGiveUps(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const iv = 100 * time.Millisecond
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, burst := range []int{1, 3} {
		l := newLimiter(10, burst)
		now := t0
		type res struct {
			at    slot      // the slot
			until time.Time // when the caller gives up
		}
		var waiting []res
		var sent []time.Time
		for range 5000 {
			now = now.Add(time.Duration(rnd.IntN(40)) * time.Millisecond)
			// Those whose request is due go; those whose patience ran out give up.
			kept := waiting[:0]
			for _, w := range waiting {
				switch due := w.at.at.Add(-l.tolerance); {
				case !due.After(now) && !due.After(w.until):
					sent = append(sent, due)
				case w.until.Before(now):
					l.cancel(w.at, w.until)
				default:
					kept = append(kept, w)
				}
			}
			waiting = kept
			d, at := l.reserve(now)
			if d == 0 {
				sent = append(sent, now)
				continue
			}
			waiting = append(waiting, res{at: at, until: now.Add(time.Duration(rnd.IntN(2000)) * time.Millisecond)})
		}
		slices.SortFunc(sent, time.Time.Compare)
		// Many more wait than the rate serves: it must be used, not lost
		// to slots of tries that gave up.
		if most := int(now.Sub(t0)/iv) + burst; len(sent) < most*9/10 {
			t.Fatalf("burst %d: %d requests sent in %v, the rate allows %d", burst, len(sent), now.Sub(t0), most)
		}
		for i := range sent {
			for j := i + burst; j < len(sent); j++ {
				window := sent[j].Sub(sent[i])
				if allowed := burst + int(window/iv); j-i+1 > allowed {
					t.Fatalf("burst %d: %d requests within %v, allowed %d", burst, j-i+1, window, allowed)
				}
				if j-i > 3*burst {
					break
				}
			}
		}
	}
}

// TestRateLimitAfterAbandonedWaits: 40 messages at once at 10/s, each try
// ending after 1s, so 30 give up waiting for the limiter; a message sent
// half a second later, to an endpoint idle since, goes within its try.
// When given-up waits kept their slots, it waited for all 30 of them (3s)
// and failed, and a sink with more waiting tries than its rate serves in a
// try's time sent nothing at all. Batched, a batch whose members all gave
// up while it waited kept its slot the same way, and then sent nothing.
func TestRateLimitAfterAbandonedWaits(t *testing.T) {
	for _, batched := range []bool{false, true} {
		var sent atomic.Int64
		srv := newServer(t, func(w http.ResponseWriter, r *http.Request) { sent.Add(1) })
		over := map[string]any{"rate-limit": 10.0, "rate-burst": 1, "max-attempts": 1}
		if batched {
			over["batch"] = map[string]any{"max-messages": 2, "linger": "1ms"}
		}
		h := build(t, "http", sinkConfig(srv.URL, over), handler.Deps{})
		var wg sync.WaitGroup
		var gaveUp atomic.Int64
		for off := range int64(40) {
			wg.Add(1)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			h.Handle(ctx, testMessage(off), handler.AckFunc(func(err error) {
				if err != nil {
					gaveUp.Add(1)
				}
				cancel()
				wg.Done()
			}))
		}
		wg.Wait()
		if n := gaveUp.Load(); n < 15 {
			t.Fatalf("batched %v: only %d of 40 tries gave up waiting; the test needs most of them to", batched, n)
		}
		time.Sleep(500 * time.Millisecond)
		before := sent.Load()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		done := make(chan error, 1)
		h.Handle(ctx, testMessage(100), handler.AckFunc(func(err error) { done <- err }))
		if err := <-done; err != nil || sent.Load() != before+1 {
			t.Errorf("batched %v: a message to an idle endpoint after %d tries gave up: %v (%d requests)", batched, gaveUp.Load(), err, sent.Load()-before)
		}
		cancel()
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
