package receiver

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/testwait"
)

// job.call marks a job whose handler panicked as kept ("goroutines the
// handler started may still read the message"): it never carries another
// record. The same panic recovered by handler.WithRetry (as plugins are
// told to wrap themselves, and the http sink is) reached the job as an
// ordinary Ack of class panic: conclude dead-lettered it and free pooled
// the job, which carried the next records while a goroutine the handler
// started before panicking still read its *Message. Such a job is kept
// now too.
func TestAJobWhoseHandlerPanickedIsNeverReusedThroughWithRetryEither(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap bool
	}{{"called by wowd", false}, {"WithRetry", true}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newVirtualHarness(t, 1)
				produce(t, h.c, testTopic, 1, 1)
				seen := make(chan string, 1)
				var hd handler.Handler = handlerFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
					if m.Offset == 0 && m.AggregateID == "agg-0" {
						go func() {
							time.Sleep(5 * time.Second) // still working on m
							seen <- fmt.Sprintf("%q@%d", m.AggregateID, m.Offset)
						}()
						panic("bug")
					}
					ack.Done(nil)
				})
				if tc.wrap {
					hd = handler.WithRetry(hd, handler.RetryPolicy{MaxAttempts: 3, Initial: time.Millisecond})
				}
				r := h.receiver("g-rev-panic-reuse", hd, 64)
				testwait.For(t, 10*time.Second, "the first record dead-lettered", func() bool { return h.committedAtEnd("g-rev-panic-reuse") })
				produce(t, h.c, testTopic, 3000, 3000) // agg-0 ... agg-2999, offsets 1..3000
				testwait.For(t, 60*time.Second, "every record committed", func() bool { return h.committedAtEnd("g-rev-panic-reuse") })
				got := <-seen
				stop(t, r)
				if got != `"agg-0"@0` {
					t.Errorf("the message a panicking handler was given (agg-0 at offset 0) reads %s later: its job was reset and pooled while the handler still held the message (the next record may be written into it)", got)
				}
			})
		})
	}
}
