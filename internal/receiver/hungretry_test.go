package receiver

import (
	"context"
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
	synctest.Test(t, func(t *testing.T) {
		ex := executor.New(executor.Options{Workers: 2, BlockingWorkers: 4})
		h := &harness{t: t, c: newVirtualCluster(t, 1, testTopic), ex: ex}
		release := make(chan struct{})
		var running, most, others atomic.Int64
		hd := blockingFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
			if m.AggregateID == "agg-0" {
				n := running.Add(1)
				for cur := most.Load(); n > cur && !most.CompareAndSwap(cur, n); cur = most.Load() {
				}
				<-release // hangs on this payload, ignoring its context
				running.Add(-1)
				ack.Done(nil)
				return
			}
			others.Add(1)
			ack.Done(nil)
		})
		produceAt(t, h.c, testTopic, 0, "agg-0")
		r := h.receiver("g-hung-blocker", hd, 64, func(o *Options) {
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
		calls := most.Load()
		close(release)
		testwait.For(t, 30*time.Second, "every record committed", func() bool { return h.committedAtEnd("g-hung-blocker") })
		stop(t, r)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = ex.Close(ctx)
		if calls > 1 {
			t.Errorf("one hung message had %d calls of the handler at once, each holding a goroutine of the blocking pool", calls)
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
