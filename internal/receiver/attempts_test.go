package receiver

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/testwait"
)

// numbered is a handler that takes attempt numbers (as the http sink does,
// for its wowd-attempt header) and fails the first fails attempts.
type numbered struct {
	mu    sync.Mutex
	seen  []int
	fails int
}

func (n *numbered) Handle(ctx context.Context, m *handler.Message, ack handler.Ack) {
	n.HandleAttempt(ctx, m, 1, ack)
}

func (n *numbered) HandleAttempt(_ context.Context, _ *handler.Message, attempt int, ack handler.Ack) {
	n.mu.Lock()
	n.seen = append(n.seen, attempt)
	fail := len(n.seen) <= n.fails
	n.mu.Unlock()
	if fail {
		ack.Done(handler.Classed(handler.Transient, errors.New("503")))
		return
	}
	ack.Done(nil)
}

// A message held after its attempts ran out (dead letters off) and tried
// again has its attempts numbered on across the tries: the http sink's
// wowd-attempt "tells retries of the same delivery apart" (docs), and an
// endpoint that sees attempt 1 twice cannot. Found by review (the numbers
// went 1, 2, 1, 2, 1).
func TestAttemptsAreNumberedAcrossHeldTries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		produce(t, h.c, testTopic, 1, 1)
		hd := &numbered{fails: 4}
		r := h.receiver("g-attempts-held", handler.WithRetry(hd, handler.RetryPolicy{MaxAttempts: 2, Initial: 10 * time.Millisecond}), 16, func(o *Options) {
			o.DeadLetter.Enabled = false // held and retried
			o.RetryBackoff = 100 * time.Millisecond
		})
		testwait.For(t, 30*time.Second, "the record handled and committed", func() bool { return h.committedAtEnd("g-attempts-held") })
		stop(t, r)
		hd.mu.Lock()
		defer hd.mu.Unlock()
		if want := []int{1, 2, 3, 4, 5}; !slices.Equal(hd.seen, want) {
			t.Errorf("attempt numbers of one record over its held tries: %v, want %v", hd.seen, want)
		}
	})
}
