package receiver

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/testwait"
)

// A member that lost every partition (its session ended, no rejoin yet)
// and is stopped has nothing to commit: its Stop neither waits for a
// rejoin until the deadline nor reports a skipped final commit (which made
// a stop with nothing lost exit 1 after the whole timeout).
func TestAStopWithEveryPartitionLostHasNothingToCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 2)
		produce(t, h.c, testTopic, 6, 6)
		hd := handlerFunc(func(_ context.Context, _ *handler.Message, ack handler.Ack) { ack.Done(nil) })
		r := h.receiver("g-lost-only", hd, 16)
		testwait.For(t, 10*time.Second, "every record handled", func() bool {
			return len(r.active()) == 2 && r.InFlight() == 0 && h.committedAtEnd("g-lost-only")
		})
		r.onLost(context.Background(), r.cl, map[string][]int32{testTopic: {0, 1}})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		began := time.Now()
		if err := r.Stop(ctx); err != nil {
			t.Errorf("Stop: %v, want a clean stop: nothing was left to commit", err)
		}
		if took := time.Since(began); took >= 5*time.Second {
			t.Errorf("Stop took %v, the whole deadline, waiting for a rejoin with nothing to commit", took)
		}
	})
}
