package receiver

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/testwait"
)

// A retake whose offset reads fail, of a partition the member never managed
// to commit, kept the client's position: the record the old incarnation
// left unfinished (dropped as it closed) lay below it, and the new
// incarnation committed past it, lost. It restarts from the incarnation's
// own floor now (its watermark, else where it began fetching).
func TestARetakeWithFailedReadsRestartsBelowWhatItHeldUnfinished(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const group = "g-retake-loss"
		h := newVirtualHarness(t, 1)
		produce(t, h.c, testTopic, 10, 10) // offsets 0..9, one aggregate each
		var refuseCommits, refuseFetches atomic.Bool
		refuseCommits.Store(true)
		h.c.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
			h.c.KeepControl()
			if !refuseCommits.Load() {
				return nil, nil, false
			}
			r := req.(*kmsg.OffsetCommitRequest)
			resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
			for _, rt := range r.Topics {
				st := kmsg.NewOffsetCommitResponseTopic()
				st.Topic, st.TopicID = rt.Topic, rt.TopicID
				for _, p := range rt.Partitions {
					sp := kmsg.NewOffsetCommitResponseTopicPartition()
					sp.Partition, sp.ErrorCode = p.Partition, kerr.CoordinatorNotAvailable.Code
					st.Partitions = append(st.Partitions, sp)
				}
				resp.Topics = append(resp.Topics, st)
			}
			return resp, nil, true
		})
		h.c.ControlKey(int16(kmsg.OffsetFetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
			h.c.KeepControl()
			if !refuseFetches.Load() {
				return nil, nil, false
			}
			r := req.(*kmsg.OffsetFetchRequest)
			resp := r.ResponseKind().(*kmsg.OffsetFetchResponse)
			resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
			for _, g := range r.Groups {
				rg := kmsg.NewOffsetFetchResponseGroup()
				rg.Group, rg.ErrorCode = g.Group, kerr.GroupAuthorizationFailed.Code
				resp.Groups = append(resp.Groups, rg)
			}
			return resp, nil, true
		})
		var mu sync.Mutex
		done := map[int64]int{}
		var tries3 atomic.Int32
		hd := handlerFunc(func(ctx context.Context, m *handler.Message, ack handler.Ack) {
			if m.Offset == 3 && tries3.Add(1) == 1 {
				go func() { <-ctx.Done(); ack.Done(ctx.Err()) }() // unfinished until its partition goes
				return
			}
			mu.Lock()
			done[m.Offset]++
			mu.Unlock()
			ack.Done(nil)
		})
		r := h.receiver(group, hd, 16, func(o *Options) {
			o.Ingest = false
			o.CommitInterval = time.Hour
		})
		testwait.For(t, 10*time.Second, "all but offset 3 handled", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(done) == 9 && r.InFlight() == 1
		})
		// The coordinator drops the member; its offset reads fail meanwhile.
		refuseFetches.Store(true)
		_, gen := r.cl.GroupMetadata()
		r.member = "a member ID the coordinator dropped"
		r.cl.ForceRebalance()
		testwait.For(t, 60*time.Second, "the next session", func() bool {
			_, now := r.cl.GroupMetadata()
			return now > gen && r.Snapshot().AssignedPartitions == 1 && r.InFlight() == 0
		})
		refuseFetches.Store(false)
		refuseCommits.Store(false)
		produce(t, h.c, testTopic, 10, 10) // offsets 10..19
		testwait.For(t, 60*time.Second, "the new records handled", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return done[19] > 0 && r.InFlight() == 0
		})
		stop(t, r) // its final commit
		committed, _ := h.offsets(group)
		mu.Lock()
		defer mu.Unlock()
		if done[3] == 0 && committed[0] > 3 {
			t.Fatalf("offset 3 was never handled, yet the group committed past it to %d (handled: %v)", committed[0], done)
		}
	})
}

// With wow.kafka.start-offset: latest, a partition the group never
// committed was taken again by retake (the coordinator had dropped the
// member) from the log's start, not from its end as a new owner would:
// the handler got the partition's whole history, which a "latest"
// dispatcher is configured never to see. Having fetched nothing, the
// incarnation leaves the client where the start offset put it.
func TestARetakeUnderLatestDoesNotReplayHistory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const group = "g-retake-latest"
		h := newVirtualHarness(t, 1)
		produce(t, h.c, testTopic, 10, 2) // history from before the dispatcher existed
		var handled atomic.Int64
		hd := handlerFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
			handled.Add(1)
			ack.Done(nil)
		})
		r := h.receiver(group, hd, 16, func(o *Options) {
			o.ClientOpts = append(o.ClientOpts,
				kgo.ConsumeStartOffset(kgo.NewOffset().AtEnd()),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
		})
		testwait.For(t, 10*time.Second, "assigned", func() bool { return r.Snapshot().AssignedPartitions == 1 })
		time.Sleep(2 * time.Second) // nothing new: nothing handled, nothing committed
		if n := handled.Load(); n != 0 {
			t.Fatalf("%d records handled before the retake, want 0 (start-offset latest)", n)
		}
		_, gen := r.cl.GroupMetadata()
		r.member = "a member ID the coordinator dropped"
		r.cl.ForceRebalance()
		testwait.For(t, 10*time.Second, "the next session", func() bool {
			_, now := r.cl.GroupMetadata()
			return now > gen && r.Snapshot().AssignedPartitions == 1
		})
		time.Sleep(2 * time.Second)
		stop(t, r)
		if n := handled.Load(); n != 0 {
			t.Fatalf("the retake replayed %d records of the partition's history; a new owner under start-offset latest starts at the end", n)
		}
	})
}
