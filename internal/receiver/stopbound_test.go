package receiver

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/testwait"
)

// A stop whose deadline passes while a revoke (run by kgo, so the poll loop
// waits behind it) drains, with the coordinator not answering commits: the
// revoke's commit takes its commitTimeout past the deadline (it is not cut
// by it), and the stop's own final commit then took another commitTimeout
// (Stop took 20.5 s for a 500 ms deadline; the leave can add 10 s more),
// where docs/operations.md promises the final commit ends by the deadline
// + 10 s and the chart's grace period (the timeout + 15 s) covers it. The
// final commit's time now runs from the deadline.
func TestAFinalCommitBehindARevokesHungCommitEndsByItsBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const group = "g-stop-revoke-hung"
		h := newVirtualHarness(t, 2)
		var hungAt []time.Time // when each unanswered commit arrived
		var hungMu sync.Mutex
		hang := unansweredIf(h.c, kmsg.OffsetCommit, func(kmsg.Request) bool {
			hungMu.Lock()
			hungAt = append(hungAt, time.Now())
			hungMu.Unlock()
			return true
		})
		release := make(chan struct{})
		hd := handlerFunc(func(ctx context.Context, m *handler.Message, ack handler.Ack) {
			switch m.Offset {
			case 0:
				ack.Done(nil)
			case 1: // finishes once the commits hang
				go func() {
					select {
					case <-release:
						ack.Done(nil)
					case <-ctx.Done():
						ack.Done(ctx.Err())
					}
				}()
			default:
				go func() { <-ctx.Done(); ack.Done(ctx.Err()) }() // unfinished until its partition goes
			}
		})
		a := h.receiver(group, hd, 16)
		produce(t, h.c, testTopic, 8, 8)
		testwait.For(t, 10*time.Second, "a holds both partitions' records", func() bool {
			return a.Snapshot().AssignedPartitions == 2 && a.InFlight() == 6
		})
		b := h.receiver(group, hd, 16)
		testwait.For(t, 30*time.Second, "a's revoke drains", func() bool { return a.revoking.Load() > 0 && len(a.active()) == 1 })
		hang.on.Store(true)
		close(release)
		testwait.For(t, 10*time.Second, "offset 1 of each partition finished", func() bool { return a.InFlight() == 4 })
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		began := time.Now()
		err := a.Stop(ctx)
		if err == nil {
			t.Error("Stop reported a clean stop, though its commits were not answered")
		}
		took := time.Since(began)
		hang.on.Store(false)
		stopWithin(t, b, "nothing", 30*time.Second)
		if took > 500*time.Millisecond+commitTimeout+time.Second {
			t.Errorf("Stop with a 500ms deadline took %v, want its commits done by the deadline + %v", took, commitTimeout)
		}
		hungMu.Lock()
		defer hungMu.Unlock()
		deadline := began.Add(500 * time.Millisecond)
		var late []time.Duration
		for _, at := range hungAt {
			late = append(late, at.Sub(deadline))
		}
		// docs/operations.md: "the final commit has 10 s of its own past
		// [the deadline]"; the chart's grace period (timeout + 15 s) is said
		// to cover it. The last commit is the stop's final one.
		if last := late[len(late)-1]; last+commitTimeout > 15*time.Second {
			t.Logf("commits left unanswered, relative to the stop's deadline: %v", late)
			t.Fatalf("the final commit began %v past the deadline: with its commitTimeout it ends %v past it, beyond the chart's grace (timeout + 15 s) that docs/operations.md says covers it", last, last+commitTimeout)
		}
	})
}
