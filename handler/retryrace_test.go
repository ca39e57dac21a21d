package handler_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wowd/wowd/handler"
)

// revokedCtx is a message's context that ends as wowd's try context does
// when its partition is revoked: an Err that has just reported nil, then
// the registered AfterFuncs started on goroutines of their own. It ends
// at the second Err call after the wrapped handler acknowledged its
// attempt (WithRetry's last look at the context before it sets the call
// waiting), i.e. a revocation that lands in the moment between that look
// and the Observer's call.
type revokedCtx struct {
	context.Context // Background: values, no deadline

	mu      sync.Mutex
	armed   bool // the attempt was acknowledged
	looks   int  // Err calls since armed
	ended   bool
	done    chan struct{}
	funcs   []func()
	endedAt chan struct{} // closed when it ended
}

func newRevokedCtx() *revokedCtx {
	return &revokedCtx{Context: context.Background(), done: make(chan struct{}), endedAt: make(chan struct{})}
}

func (c *revokedCtx) arm() {
	c.mu.Lock()
	c.armed = true
	c.mu.Unlock()
}

func (c *revokedCtx) Done() <-chan struct{} { return c.done }

func (c *revokedCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return context.Canceled
	}
	if c.armed {
		c.looks++
		if c.looks == 2 {
			// Revoked right after this look: it still reports nil.
			c.ended = true
			close(c.done)
			close(c.endedAt)
			for _, f := range c.funcs {
				go f()
			}
			c.funcs = nil
		}
	}
	return nil
}

// AfterFunc is what context.AfterFunc uses (as for wowd's try context).
func (c *revokedCtx) AfterFunc(f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		go f()
		return func() bool { return false }
	}
	c.funcs = append(c.funcs, f)
	n := len(c.funcs) - 1
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.ended || n >= len(c.funcs) || c.funcs[n] == nil {
			return false
		}
		c.funcs[n] = nil
		return true
	}
}

// afterAckObserver records whether the message was acknowledged while (or
// before) it was told of its retry.
type afterAckObserver struct {
	acked    <-chan struct{}
	told     atomic.Int32
	afterAck atomic.Bool
}

func (o *afterAckObserver) Retrying(*handler.Message, int, error, time.Duration) {
	o.told.Add(1)
	select {
	case <-o.acked:
		o.afterAck.Store(true)
	case <-time.After(time.Second): // in the bubble: once nothing else can happen
	}
}

// TestTheObserverIsNotToldOfARetryOfAnAcknowledgedMessage: the Observer
// (wowd's receiver, through Deps.Observer) is told "attempt n of m failed
// and the handler will try again after wait", with m the pointer Handle
// was given, which wowd finds the try by. When the message's context ends
// (its partition revoked) between WithRetry's last look at the context in
// retryCall.Complete and its call of Observer.Retrying, the cancel hook
// acknowledged the message at once, and WithRetry then still reported a
// retry of it (found by review; the observer is now told while the call
// still runs): a retry that never comes, for a message it no longer owns
// (Message: handlers "must not keep it after they acknowledged it"; wowd
// pools the job and hands &j.msg to another record, whose try deadline
// Receiver.extend then moves, and whose attempt count it raises).
func TestTheObserverIsNotToldOfARetryOfAnAcknowledgedMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := newRevokedCtx()
		acked := make(chan struct{})
		var outcome error
		ack := handler.AckFunc(func(err error) {
			outcome = err
			close(acked)
		})
		obs := &afterAckObserver{acked: acked}
		inner := handler.Sync(func(context.Context, *handler.Message) error {
			ctx.arm()
			return errors.New("503") // transient: retried after an hour
		})
		h := handler.WithRetry(inner, handler.RetryPolicy{Initial: time.Hour, Max: time.Hour, Observer: obs})
		h.Handle(ctx, &handler.Message{Topic: "wow.t.a.event", Offset: 7}, ack)
		synctest.Wait()
		select {
		case <-ctx.endedAt:
		default:
			t.Fatal("the test's revocation did not happen (WithRetry looks at its context differently now)")
		}
		select {
		case <-acked:
		case <-time.After(time.Minute):
			t.Fatal("not acknowledged after its context ended")
		}
		if !errors.Is(outcome, context.Canceled) {
			t.Errorf("outcome %v, want context.Canceled", outcome)
		}
		if obs.afterAck.Load() {
			t.Errorf("Observer.Retrying was told of a retry of a message WithRetry had acknowledged (with %v) meanwhile: no retry comes, and the message is no longer the handler's", outcome)
		}
		_ = h.(handler.Closer).Close(context.Background())
	})
}

// TestACancelWhileWaitingForThePoolIsAcknowledgedAtOnce: WithRetry
// promises that "when the message's context is canceled, the message is
// acknowledged at once with an error wrapping ctx.Err() and h is not
// called again for it; an attempt in progress is left to h". A Blocker's
// retry whose backoff ended and that waits for a goroutine of the pool
// (handler.Resumer) runs no attempt, yet a cancellation then was not
// acknowledged (found by review): retryCall.canceled found the call
// "running" and left it to an attempt that did not exist. The message stays unacknowledged
// until the pool gets to it, which, with the pool's goroutines held by
// hung calls (what the pool bounds), is until they end.
func TestACancelWhileWaitingForThePoolIsAcknowledgedAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner := &flaky{fails: 1, err: errors.New("down")}
		h := handler.WithRetry(blockingFlaky{inner}, handler.RetryPolicy{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond})
		p := newTestPool()
		ctx, cancel := context.WithCancel(context.Background())
		ack, ch := outcome(t)
		h.Handle(poolCtx{ctx, p}, msg, ack) // returns at the first failure: the backoff holds no goroutine
		select {
		case <-p.added: // the backoff ended: the retry waits for the pool, which is busy
		case <-time.After(time.Minute):
			t.Fatal("the retry was not handed to the pool")
		}
		p.added <- struct{}{} // for p.next below
		cancel()              // the partition is revoked
		synctest.Wait()
		select {
		case err := <-ch:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("outcome %v, want context.Canceled", err)
			}
		default:
			t.Errorf("context canceled while no attempt ran (the retry waited for the pool): not acknowledged")
		}
		p.next(t, true) // the pool gets to it at last
		synctest.Wait()
		if n := inner.calls.Load(); n != 1 {
			t.Errorf("%d calls, want 1: none after the cancellation", n)
		}
		_ = h.(handler.Closer).Close(context.Background())
	})
}
