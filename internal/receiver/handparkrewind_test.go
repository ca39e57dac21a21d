package receiver

import (
	"context"
	"encoding/binary"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/internal/park"
	"github.com/wowd/wowd/internal/testwait"
)

// rewindGroup commits offset to every partition of testTopic for group, as
// `wowd rewind --execute` does with the dispatcher stopped.
func (h *harness) rewindGroup(group string, offset int64) {
	h.t.Helper()
	cl, err := kgo.NewClient(brokers(h.c)...)
	if err != nil {
		h.t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	_, end := h.offsets(group)
	var os kadm.Offsets
	for p := range end {
		os.Add(kadm.Offset{Topic: testTopic, Partition: p, At: offset, LeaderEpoch: -1})
	}
	resp, err := adm.CommitOffsets(context.Background(), group, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		h.t.Fatal(err)
	}
}

// docs/operations.md, "Rewinding a dispatcher": "An aggregate that is
// parked stays parked across a rewind ... Its messages *before* the head
// are not replayed either: they were handled before the aggregate parked,
// and wowd finishes them without a handler call (as it does with any such
// message delivered again) ... To replay a parked aggregate's history,
// redrive, skip or discard it first, then rewind."
//
// An aggregate parked by hand (the admin API's park, or the page's button
// by a hot aggregate) records Offset -1 (park.go, parkByHand), so none of
// its replayed messages counted as before the head: the replay parked them
// all behind the head, and the redrive handed the aggregate's whole history
// to the handler again, against the docs. Found by review; the park by
// hand now records where the aggregate's unresolved records start.
func TestARewindDoesNotReplayAHandParkedAggregatesHistory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const group = "g-rd-hand-rewind"
		h := newVirtualHarness(t, 1)
		produce(t, h.c, testTopic, 3, 1) // agg-0 #0..#2
		sink := newParkSink(func(string, uint64) bool { return false })
		r := h.receiver(group, sink, 16, parking)
		testwait.For(t, 30*time.Second, "every record handled", func() bool { return h.committedAtEnd(group) })
		if got := sink.of("agg-0"); !slices.Equal(got, seqs(0, 3)) {
			t.Fatalf("agg-0 handled %v, want %v", got, seqs(0, 3))
		}
		if n, err := r.ParkByHand(context.Background(), "agg-0", "test"); err != nil || n != 1 {
			t.Fatalf("parking by hand: %d, %v", n, err)
		}
		testwait.For(t, 30*time.Second, "agg-0 parked by hand", func() bool {
			st := h.parkedState("agg-0")
			return st != nil && st.Class == park.ClassByHand && st.Request == nil && r.Snapshot().ParkedAggregates == 1
		})
		stop(t, r)

		// wowd rewind --to earliest, then the dispatcher starts again.
		h.rewindGroup(group, 0)
		r = h.receiver(group, sink, 16, parking)
		defer stop(t, r)
		testwait.For(t, 30*time.Second, "the replay finished", func() bool { return h.committedAtEnd(group) })
		if st := h.parkedState("agg-0"); st == nil {
			t.Fatal("agg-0 not parked any more after the rewind")
		}
		var replayed []uint64
		for _, rec := range dlqRecords(t, h.c, park.Topic(testTopic), 0) {
			replayed = append(replayed, binary.BigEndian.Uint64(rec.Value))
		}
		if len(replayed) != 0 {
			t.Errorf("the replay parked agg-0's messages from before the park by hand, %v, behind its head (the docs: finished without a handler call)", replayed)
		}

		h.ask("agg-0", park.Redrive)
		testwait.For(t, 30*time.Second, "agg-0 unparked", func() bool {
			return h.parkedState("agg-0") == nil && r.Snapshot().ParkedAggregates == 0
		})
		if got := sink.of("agg-0"); !slices.Equal(got, seqs(0, 3)) {
			t.Errorf("after the rewind and a redrive the handler saw agg-0 %v, want %v: its history from before the park was replayed", got, seqs(0, 3))
		}
	})
}
