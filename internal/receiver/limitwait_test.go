package receiver

import (
	"context"
	"slices"
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
		late4 := make(chan handler.Ack, 1)
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
			case 4:
				// Reports a wait with its context but another message:
				// nothing changes, its deadline runs.
				r.Waiting(ctx, &handler.Message{})
				go func() {
					time.Sleep(time.Second)
					late4 <- ack
				}()
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
		(<-late4).Done(nil)
		stop(t, r)
		if handled.Load() != 4 {
			t.Errorf("handled %d, want 4 (offset 1 waited for its turn, offsets 2 and 4 ran past their deadlines)", handled.Load())
		}
		dl := dlqRecords(t, h.c, testTopic+".dlq", 2)
		var offs []string
		for _, d := range dl {
			offs = append(offs, header(d, HeaderSourceOffset))
		}
		slices.Sort(offs)
		if !slices.Equal(offs, []string{"2", "4"}) {
			t.Fatalf("dead letters of offsets %v, want 2 and 4 failed by their deadlines", offs)
		}
		if n := counterValue(t, m.Registry, "wowd_handler_timeouts_total"); n != 2 {
			t.Errorf("wowd_handler_timeouts_total %v, want 2", n)
		}
	})
}
