package receiver

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/testwait"
)

// TestARevokeCutShortByTheStopStillCommits: a revoke drains while the
// receiver stops, and the stop's deadline passes. The deadline ended the
// drain and cancelled the revoke's commit as well, and the stop, finding
// the revoke's join under way, skipped its own final commit: nothing was
// committed, and every record finished since the last commit would be
// delivered again. The revoke's commit now has its own time, as the stop's
// final commit has. Found by a review (failed 5 of 5 under -race).
func TestARevokeCutShortByTheStopStillCommits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const group = "g-stop-during-revoke"
		h := newVirtualHarness(t, 1)
		hd := handlerFunc(func(ctx context.Context, m *handler.Message, ack handler.Ack) {
			if m.Offset == 2 { // unfinished until its try ends
				go func() { <-ctx.Done(); ack.Done(ctx.Err()) }()
				return
			}
			ack.Done(nil)
		})
		r := h.receiver(group, hd, 16, func(o *Options) {
			o.RevokeTimeout = 4 * time.Second
			o.CommitInterval = time.Hour // no periodic commit: only the revoke's or the stop's
		})
		produce(t, h.c, testTopic, 4, 4)
		testwait.For(t, 10*time.Second, "offsets 0, 1 and 3 finished, 2 in flight", func() bool {
			return len(r.active()) == 1 && r.InFlight() == 1 && r.active()[0].tr.span() == 2
		})
		revoked := make(chan struct{})
		go func() {
			r.onRevoked(context.Background(), r.cl, map[string][]int32{testTopic: {0}})
			close(revoked)
		}()
		time.Sleep(100 * time.Millisecond) // the revoke drains
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		_ = r.Stop(ctx) // past its deadline: offset 2 never finishes
		<-revoked
		if committed, _ := h.offsets(group); committed[0] != 2 {
			t.Fatalf("partition 0 committed at %d, want 2 (offsets 0 and 1 finished)", committed[0])
		}
	})
}
