package receiver

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/executor"
	"github.com/wowd/wowd/internal/testwait"
)

// A try the deadline concluded was retried (held: dead letters off, or the
// receiver backing off) while its handler call might still be running:
// a Blocker that hangs inside Handle on one message (ignoring its context)
// got a new call of the same message at every retry, each on a goroutine
// of the shared blocking pool that never came back. After pool-size
// retries the pool was exhausted: every aggregate of every blocking
// dispatcher on the executor stalled, for one message. A held retry now
// waits for the call it follows to return. docs/operations.md: "the deadline
// concludes a hung try either way" and "declare it handler.Blocker, so
// that such calls run on the blocking pool ... and not on the shared
// workers, which other aggregates need".
func TestAHungBlockerGetsNoSecondCallFromItsRetries(t *testing.T) {
	hungBlockerHoldsOneGoroutine(t, "g-hung-blocker", func(int64) bool { return true }, nil)
}

// The first version of 4bdd8e1 guarded held retries with a flag set only
// while the receiver's call of Handle ran. A Blocker wrapped in
// handler.WithRetry (the SDK's documented way, with wowd's Resumer in the
// try's context) makes its second and later attempts on the blocking pool
// after Handle returned; if such an attempt hung, deaf to its context,
// each held retry called Handle again: one more pool goroutine per retry.
// What runs through the try's Resumer counts among its calls now. (A
// review of the first version wrote this test.)
func TestAHungAttemptResumedOnThePoolGetsNoSecondCall(t *testing.T) {
	// The first attempt of each try fails fast (a 503); the retry after
	// WithRetry's backoff hangs (a stuck connection).
	hungBlockerHoldsOneGoroutine(t, "g-hung-resume", func(call int64) bool { return call%2 == 0 }, func(inner handler.Handler) handler.Handler {
		return handler.WithRetry(inner, handler.RetryPolicy{MaxAttempts: 3, Initial: 100 * time.Millisecond, Max: 100 * time.Millisecond})
	})
}

// hungBlockerHoldsOneGoroutine runs a Blocker (wrapped by wrap, if set) on
// a blocking pool of 4 whose call n (from 1) of agg-0's message hangs,
// deaf to its context, when hangs(n), and fails transiently otherwise,
// with dead letters off and a 1 s handler.timeout; 30 s later three other
// aggregates come. Each must be handled, and agg-0 must never have two
// hung calls at once.
func hungBlockerHoldsOneGoroutine(t *testing.T, group string, hangs func(call int64) bool, wrap func(handler.Handler) handler.Handler) {
	synctest.Test(t, func(t *testing.T) {
		ex := executor.New(executor.Options{Workers: 2, BlockingWorkers: 4})
		h := &harness{t: t, c: newVirtualCluster(t, 1, testTopic), ex: ex}
		release := make(chan struct{})
		var calls, running, most, others atomic.Int64
		var hd handler.Handler = blockingFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
			if m.AggregateID != "agg-0" {
				others.Add(1)
				ack.Done(nil)
				return
			}
			if !hangs(calls.Add(1)) {
				ack.Done(handler.Classed(handler.Transient, errors.New("503")))
				return
			}
			n := running.Add(1)
			for cur := most.Load(); n > cur && !most.CompareAndSwap(cur, n); cur = most.Load() {
			}
			<-release // hangs on this payload, ignoring its context
			running.Add(-1)
			ack.Done(nil)
		})
		if wrap != nil {
			hd = wrap(hd)
		}
		produceAt(t, h.c, testTopic, 0, "agg-0")
		r := h.receiver(group, hd, 64, func(o *Options) {
			rt := o.Routes[testTopic]
			rt.Group = ex.Group(true)
			o.Routes = map[string]Route{testTopic: rt}
			o.DeadLetter.Enabled = false
			o.HandlerTimeout = time.Second
			o.RetryBackoff = time.Second
		})
		time.Sleep(30 * time.Second)
		produceAt(t, h.c, testTopic, 0, "agg-1", "agg-2", "agg-3")
		time.Sleep(30 * time.Second)
		stalled := others.Load()
		concurrent := most.Load()
		close(release)
		testwait.For(t, 30*time.Second, "every record committed", func() bool { return h.committedAtEnd(group) })
		stop(t, r)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = ex.Close(ctx)
		if concurrent > 1 {
			t.Errorf("one hung message had %d hung calls of the Blocker at once, each holding a goroutine of the blocking pool", concurrent)
		}
		if stalled != 3 {
			t.Errorf("agg-1..3 (other aggregates) handled %d of 3 within 30 s: the blocking pool is held by agg-0's retries", stalled)
		}
	})
}

// The same without handler.Blocker: every held retry of the timed out try
// ran Handle on its hold timer's goroutine, which hung too: one more
// goroutine (and one more concurrent call of the same message) per retry,
// without bound (334 after 10 minutes).
func TestAHungHandlerGetsNoConcurrentCallsFromItsRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		release := make(chan struct{})
		var running, most atomic.Int64
		hd := handlerFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
			n := running.Add(1)
			for cur := most.Load(); n > cur && !most.CompareAndSwap(cur, n); cur = most.Load() {
			}
			<-release // hangs on this payload, ignoring its context
			running.Add(-1)
			ack.Done(nil)
		})
		produceAt(t, h.c, testTopic, 0, "agg-0")
		r := h.receiver("g-hung-sync", hd, 64, func(o *Options) {
			o.DeadLetter.Enabled = false
			o.HandlerTimeout = time.Second
			o.RetryBackoff = time.Second
		})
		time.Sleep(10 * time.Minute)
		calls := most.Load()
		close(release)
		testwait.For(t, 30*time.Second, "every record committed", func() bool { return h.committedAtEnd("g-hung-sync") })
		stop(t, r)
		if calls > 1 {
			t.Errorf("one hung message had %d calls of the handler at once after 10 minutes, each a goroutine that never returns", calls)
		}
	})
}
