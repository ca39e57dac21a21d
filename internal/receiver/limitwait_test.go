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

// A try whose handler reports it waits for the handler's own limits (the
// http sink's rate limit or max-concurrency: handler.WaitObserver) is not
// timed while it waits: its deadline starts again when the handler reports
// the attempt started. Before, a message queued behind a low rate-limit
// longer than handler.timeout was timed out without a request sent, and
// parked or dead-lettered. The deadline still holds the attempt itself,
// and a report for a try that is over suspends nothing.
func TestATryWaitingForTheHandlersLimitsIsNotTimed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		produce(t, h.c, testTopic, 6, 6)
		var rcv atomic.Pointer[Receiver]
		var handled atomic.Int64
		late := make(chan handler.Ack, 1)
		hd := handlerFunc(func(ctx context.Context, m *handler.Message, ack handler.Ack) {
			r := rcv.Load()
			switch m.Offset {
			case 1:
				// Waits ten timeouts for its turn, then its request
				// answers within one.
				r.Waiting(ctx, m)
				go func() {
					time.Sleep(3 * time.Second)
					r.Started(ctx, m)
					time.Sleep(200 * time.Millisecond)
					handled.Add(1)
					ack.Done(nil)
				}()
			case 2:
				// Waits, starts, then its attempt runs past the deadline,
				// which counts from the start.
				r.Waiting(ctx, m)
				go func() {
					time.Sleep(time.Second)
					r.Started(ctx, m)
					late <- ack
				}()
			case 3:
				// Reports a wait after its try ended: nothing changes.
				handled.Add(1)
				ack.Done(nil)
				r.Waiting(ctx, m)
			default:
				handled.Add(1)
				ack.Done(nil)
			}
		})
		m := metrics.New("test")
		r := h.receiver("g-limit-wait", hd, 16, func(o *Options) {
			o.HandlerTimeout = 300 * time.Millisecond
			o.Metrics = m
		})
		rcv.Store(r)
		testwait.For(t, 30*time.Second, "every record finished", func() bool { return h.committedAtEnd("g-limit-wait") })
		(<-late).Done(nil) // too late: ignored
		stop(t, r)
		if handled.Load() != 5 {
			t.Errorf("handled %d, want 5 (offset 1 waited for its turn, offset 2 ran past its deadline)", handled.Load())
		}
		dl := dlqRecords(t, h.c, testTopic+".dlq", 1)
		if len(dl) != 1 || header(dl[0], HeaderSourceOffset) != "2" {
			t.Fatalf("%d dead letters, want offset 2 failed by its deadline", len(dl))
		}
		if n := counterValue(t, m.Registry, "wowd_handler_timeouts_total"); n != 1 {
			t.Errorf("wowd_handler_timeouts_total %v, want 1", n)
		}
	})
}
