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

// The first version of 4bdd8e1 guarded held retries with a flag set only
// while the receiver's call of Handle ran. A Blocker wrapped in
// handler.WithRetry (the SDK's documented way, with wowd's Resumer in the
// try's context) makes its second and later attempts on the blocking pool
// after Handle returned; if such an attempt hung, deaf to its context,
// each held retry called Handle again: one more pool goroutine per retry.
// What runs through the try's Resumer counts among its calls now. (A
// review of the first version wrote this test.)
func TestAHungAttemptResumedOnThePoolGetsNoSecondCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ex := executor.New(executor.Options{Workers: 2, BlockingWorkers: 4})
		h := &harness{t: t, c: newVirtualCluster(t, 1, testTopic), ex: ex}
		release := make(chan struct{})
		var calls, running, most, others atomic.Int64
		inner := blockingFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
			if m.AggregateID != "agg-0" {
				others.Add(1)
				ack.Done(nil)
				return
			}
			if calls.Add(1)%2 == 1 {
				// The first attempt of each try fails fast (a 503); the
				// retry after WithRetry's backoff hangs (a stuck
				// connection), ignoring its context.
				ack.Done(handler.Classed(handler.Transient, errors.New("503")))
				return
			}
			n := running.Add(1)
			for cur := most.Load(); n > cur && !most.CompareAndSwap(cur, n); cur = most.Load() {
			}
			<-release
			running.Add(-1)
			ack.Done(nil)
		})
		hd := handler.WithRetry(inner, handler.RetryPolicy{MaxAttempts: 3, Initial: 100 * time.Millisecond, Max: 100 * time.Millisecond})
		produceAt(t, h.c, testTopic, 0, "agg-0")
		r := h.receiver("g-hung-resume", hd, 64, func(o *Options) {
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
		testwait.For(t, 30*time.Second, "every record committed", func() bool { return h.committedAtEnd("g-hung-resume") })
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
