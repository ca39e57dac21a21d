package receiver

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/metrics"
	"github.com/wowd/wowd/internal/testwait"
)

// A try reported waiting for the handler's own limits was never timed,
// even once its partition was lost or revoked and its context ended. A handler whose limit wait does not watch the context (a plain
// semaphore) then holds the aggregate's mailbox for good: when the
// partition comes back, the aggregate's records queue behind the old
// incarnation's try and never run. docs/operations.md: "Tries of a
// partition that moved to another member are still held to their
// deadline: the deadline concludes a hung try either way." The wait is
// honoured only while the partition is owned now.
func TestAWaitingTryOfALostPartitionIsConcludedAtItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		produceAt(t, h.c, testTopic, 0, "agg-0")
		var rcv atomic.Pointer[Receiver]
		release := make(chan struct{})
		var calls, handled atomic.Int64
		hd := handlerFunc(func(ctx context.Context, m *handler.Message, ack handler.Ack) {
			if calls.Add(1) == 1 {
				rcv.Load().Waiting(ctx, m) // queued behind the handler's own limit ...
				go func() {
					<-release // ... which never frees for it (it does not watch ctx)
					ack.Done(ctx.Err())
				}()
				return
			}
			handled.Add(1)
			ack.Done(nil)
		})
		r := h.newReceiver("g-rev-wait-lost", hd, 16, func(o *Options) { o.HandlerTimeout = time.Second })
		rcv.Store(r)
		r.Start(context.Background())
		testwait.For(t, 10*time.Second, "the first try waiting", func() bool { return calls.Load() == 1 })
		time.Sleep(100 * time.Millisecond)
		r.onLost(context.Background(), r.cl, map[string][]int32{testTopic: {0}})
		r.onAssigned(context.Background(), r.cl, map[string][]int32{testTopic: {0}}) // as the rejoin would
		produceAt(t, h.c, testTopic, 0, "agg-1", "agg-0")                            // the client fetches on from offset 1
		testwait.For(t, 10*time.Second, "agg-1 handled", func() bool { return handled.Load() == 1 })
		time.Sleep(10 * time.Minute)
		got := handled.Load() - 1 // agg-0's
		close(release)
		testwait.For(t, 30*time.Second, "the record committed", func() bool { return h.committedAtEnd("g-rev-wait-lost") })
		stop(t, r)
		if got == 0 {
			t.Errorf("10 minutes after its partition was lost and taken again (handler.timeout 1s), agg-0's next message was not handled (agg-1's was): the lost incarnation's waiting try still holds agg-0's mailbox")
		}
	})
}

// A try waiting for the handler's limits when its partition is let go is
// timed from the moment it was let go, not from its attempt's start long
// before: a handler that gives the wait up on the try's end (the http sink
// drops a queued request) is not counted as a timeout for it, which every
// revoke of a partition with a backlog behind a rate limit did.
func TestAWaitingTryOfALostPartitionHasATimeoutFromTheLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		produceAt(t, h.c, testTopic, 0, "agg-0")
		var rcv atomic.Pointer[Receiver]
		waiting := make(chan struct{})
		hd := handlerFunc(func(ctx context.Context, m *handler.Message, ack handler.Ack) {
			rcv.Load().Waiting(ctx, m)
			close(waiting)
			go func() {
				<-ctx.Done()
				time.Sleep(150 * time.Millisecond) // gives its place up
				ack.Done(ctx.Err())
			}()
		})
		m := metrics.New("test")
		r := h.receiver("g-wait-loss-timeout", hd, 16, func(o *Options) {
			o.HandlerTimeout = 300 * time.Millisecond
			o.Metrics = m
		})
		rcv.Store(r)
		<-waiting
		time.Sleep(5 * time.Second) // waits ten timeouts for its turn
		r.onLost(context.Background(), r.cl, map[string][]int32{testTopic: {0}})
		time.Sleep(2 * time.Second)
		stop(t, r)
		if n := counterValue(t, m.Registry, "wowd_handler_timeouts_total"); n != 0 {
			t.Errorf("wowd_handler_timeouts_total %v, want 0: the try gave its wait up 150ms after its partition was lost", n)
		}
	})
}
