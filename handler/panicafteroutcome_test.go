package handler_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wowd/wowd/handler"
)

// panicsAfterTransientAck is a Blocker that reports a transient failure on
// its first attempt and then panics (a deferred cleanup that panics, say);
// its second attempt succeeds.
type panicsAfterTransientAck struct{ calls atomic.Int32 }

func (h *panicsAfterTransientAck) Blocking() bool { return true }

func (h *panicsAfterTransientAck) Handle(_ context.Context, _ *handler.Message, ack handler.Ack) {
	if h.calls.Add(1) == 1 {
		ack.Done(errors.New("503"))
		panic("boom after the outcome")
	}
	ack.Done(nil)
}

// TestABlockerPanickingAfterATransientFailureIsRetried: WithRetry keeps
// the outcome an attempt reported before it panicked. For a Blocker that
// reported a transient failure, the retry after the backoff must follow;
// the attempt's panic was taken for "no attempt made" (its context ended),
// so nobody waited out the backoff, and the message was never acknowledged
// until its context ended or the handler closed (with handler.timeout 0,
// its aggregate stalled for good). Found by review.
func TestABlockerPanickingAfterATransientFailureIsRetried(t *testing.T) {
	for _, withPool := range []bool{false, true} {
		name := "in place"
		if withPool {
			name = "resumer"
		}
		t.Run(name, func(t *testing.T) {
			inner := &panicsAfterTransientAck{}
			h := handler.WithRetry(inner, handler.RetryPolicy{MaxAttempts: 5, Initial: time.Millisecond, Max: time.Millisecond})
			var ctx context.Context = context.Background()
			var p *testPool
			if withPool {
				p = newTestPool()
				ctx = poolCtx{context.Background(), p}
				go func() { // a pool that runs everything resumed
					for range p.added {
						p.mu.Lock()
						q := p.queued
						p.queued = nil
						p.mu.Unlock()
						for _, f := range q {
							f(true)
						}
					}
				}()
			}
			ack, ch := outcome(t)
			returned := make(chan struct{})
			go func() { defer close(returned); h.Handle(ctx, msg, ack) }()
			select {
			case err := <-ch:
				if err != nil {
					t.Fatalf("outcome %v, want nil after a retry", err)
				}
			case <-time.After(2 * time.Second):
				t.Fatalf("not acknowledged 2s after a transient failure with a 1ms backoff; attempts made: %d", inner.calls.Load())
			}
			<-returned
		})
	}
}
