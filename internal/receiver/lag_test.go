package receiver

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/memory"
	"github.com/wowd/wowd/internal/testwait"
)

// The lag gauges count from the committed offsets, as their help and
// docs/metrics.md say (wowd_receiver_lag_records, wowd_commit_lag_records):
// with every commit refused and all 20 records handled, both read 0,
// counted from the end of the finished records instead, while a restart
// would read all 20 again. Found by review.
func TestLagCountsFromCommittedOffsets(t *testing.T) {
	h := newHarness(t, 1)
	produce(t, h.c, testTopic, 20, 5)
	var refused atomic.Int64
	h.c.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.c.KeepControl()
		r := req.(*kmsg.OffsetCommitRequest)
		resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic = rt.Topic
			for _, p := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition, sp.ErrorCode = p.Partition, kerr.GroupAuthorizationFailed.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		refused.Add(1)
		return resp, nil, true
	})
	var handled atomic.Int64
	hd := handlerFunc(func(_ context.Context, _ *handler.Message, ack handler.Ack) {
		handled.Add(1)
		ack.Done(nil)
	})
	r := h.receiver("g-lag-committed", hd, 64)
	testwait.For(t, 10*time.Second, "every record handled and a commit refused", func() bool {
		return handled.Load() == 20 && r.InFlight() == 0 && refused.Load() > 0
	})
	s := r.Snapshot()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.Stop(ctx) // its final commit is refused too
	if s.Lag != 20 || s.CommitLag != 20 {
		t.Fatalf("lag %d, commit lag %d with nothing committed: want 20 and 20", s.Lag, s.CommitLag)
	}
}

// A partition whose fetched records are all held (the window full with
// another's) counts its lag from where it was fetched, not 0: nothing of it
// is committed or admitted yet, and a restart would read it all again.
// Found by review; polls driven by hand.
func TestLagCountsAPartitionWhoseRecordsAreAllHeld(t *testing.T) {
	h := newHarness(t, 2)
	acks := make(chan handler.Ack, 1000)
	hd := handlerFunc(func(_ context.Context, _ *handler.Message, ack handler.Ack) { acks <- ack })
	b, err := memory.New(memory.MinLimit, 1)
	if err != nil {
		t.Fatal(err)
	}
	r := h.receiver("g-lag-held", hd, 64, func(o *Options) { o.Fetch = b.Join() })
	stop(t, r)
	r.stopping.Store(false)
	r.closing.Store(false)
	r.onAssigned(context.Background(), r.cl, map[string][]int32{testTopic: {0}})
	p0 := r.parts[tp{testTopic, 0}]
	r.pollRound(heldFetch(0, 0, 100, 1))
	testwait.For(t, 5*time.Second, "the window filled by partition 0", func() bool { return len(acks) == 64 })
	r.onAssigned(context.Background(), r.cl, map[string][]int32{testTopic: {1}})
	p1 := r.parts[tp{testTopic, 1}]
	r.pollRound(heldFetch(1, 0, 10, 1))
	if len(p1.held) != 10 {
		t.Fatalf("setup: partition 1 holds %d of its 10 records, want all", len(p1.held))
	}
	if s := r.Snapshot(); s.Lag != 110 {
		t.Errorf("lag %d with nothing committed, partition 0 at 100 and partition 1 at 10 (all held): want 110", s.Lag)
	}
	r.dropHeld(p0, 0)
	r.dropHeld(p1, 0)
	finishAll(t, acks, p0)
	r.closePartition(p0)
	r.closePartition(p1)
}
