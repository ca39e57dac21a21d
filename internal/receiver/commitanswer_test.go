package receiver

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/testwait"
)

// A commit whose answer does not confirm a partition asked is a failed
// commit of that partition, not a success. From version 10 an answer names
// its topics by ID only, and kgo fills their names in only for a commit of
// the current generation: matched by name alone, an answer to a commit of
// an earlier generation confirmed nothing, and its errors were dropped, yet
// the commit counted ok. Here the broker answers a commit with no topics.
func TestACommitAnswerThatConfirmsNothingIsAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		produce(t, h.c, testTopic, 4, 4)
		var empty atomic.Bool
		h.c.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
			h.c.KeepControl()
			if !empty.Load() {
				return nil, nil, false
			}
			return req.(*kmsg.OffsetCommitRequest).ResponseKind(), nil, true
		})
		hd := handlerFunc(func(_ context.Context, _ *handler.Message, ack handler.Ack) { ack.Done(nil) })
		r := h.receiver("g-commit-answer", hd, 16, func(o *Options) { o.CommitInterval = time.Hour })
		testwait.For(t, 10*time.Second, "every record handled", func() bool {
			ps := r.active()
			if len(ps) != 1 || r.InFlight() != 0 {
				return false
			}
			ps[0].mu.Lock()
			defer ps[0].mu.Unlock()
			next, _, ok := ps[0].tr.watermark()
			return ok && next == 4
		})
		empty.Store(true)
		r.commitMu.lock()
		err := r.commitAll(context.Background())
		r.commitMu.unlock()
		if err == nil || !strings.Contains(err.Error(), "no answer") {
			t.Errorf("commit answered with nothing: %v, want an error", err)
		}
		if c := r.active()[0].committed.Load(); c == 4 {
			t.Errorf("partition counted committed at %d", c)
		}
		empty.Store(false)
		stop(t, r)
		if got, _ := h.offsets("g-commit-answer"); got[0] != 4 {
			t.Errorf("committed %v after the stop, want 4", got)
		}
	})
}
