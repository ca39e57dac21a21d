package receiver

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/internal/testwait"
	"github.com/wowd/wowd/internal/wow/wowtest"
)

// onGapPark sets the version check's on-gap policy to park.
func onGapPark(o *Options) { o.OnGapPark = true }

// ownerAndPeer starts two instances of a dispatcher with the version check
// and on-gap park in group: A owning the only partition, B none (the test
// is skipped if B took it), and waits until both read their start
// barriers for cart-1. Both stop when t ends.
func ownerAndPeer(t *testing.T, group string) (h *harness, sink *versionSink, a, b *Receiver) {
	t.Helper()
	h = newHarness(t, 1)
	sink = &versionSink{got: map[string][]int64{}}
	a = h.receiver(group, sink, 16, wowOpts, parking, onGapPark)
	t.Cleanup(func() { stop(t, a) })
	testwait.For(t, 30*time.Second, "A ready and owning the partition", func() bool { return a.Ready() && len(a.Partitions()) == 1 })
	b = h.receiver(group, sink, 16, wowOpts, parking, onGapPark)
	t.Cleanup(func() { stop(t, b) })
	testwait.For(t, 30*time.Second, "B ready", b.Ready)
	if len(b.Partitions()) != 0 {
		t.Skip("B took the partition")
	}
	testwait.For(t, 30*time.Second, "the start barriers read", func() bool {
		return !a.heldLocally(testTopic, "cart-1") && !b.heldLocally(testTopic, "cart-1")
	})
	return h, sink, a, b
}

// TestOnGapParkGivesALocalRecordUpAtAGap: one instance, owner of the only
// partition, version check with on-gap park. cart-1's v1 and then v3 are
// ingested: v3 is a gap. A local record cannot be parked, so v3 is given
// up (not handled "anyway", which would publish its copy marked as handled
// and nobody would ever park it): its copy, unmarked, reaches the owner
// from Kafka, which parks the aggregate at it.
func TestOnGapParkGivesALocalRecordUpAtAGap(t *testing.T) {
	h := newHarness(t, 1)
	sink := &versionSink{got: map[string][]int64{}}
	r := h.receiver("g-ongap-local", sink, 16, wowOpts, parking, onGapPark)
	defer stop(t, r)
	testwait.For(t, 30*time.Second, "ready and owning the partition", func() bool { return r.Ready() && len(r.Partitions()) == 1 })
	testwait.For(t, 30*time.Second, "the start barrier read", func() bool { return !r.heldLocally(testTopic, "cart-1") })
	if !ingestValue(t, h, r, "cart-1", wowtest.EventStream("shop", "cart", "cart-1", 1)) {
		t.Fatal("v1 not finished locally")
	}
	fin := ingestValue(t, h, r, "cart-1", wowtest.EventStream("shop", "cart", "cart-1", 3))
	testwait.For(t, 30*time.Second, "everything committed", func() bool { return h.committedAtEnd("g-ongap-local") })
	st := h.parkedState("cart-1")
	t.Logf("v3 finished locally: %v; handled %v; parked state %+v", fin, sink.of("cart-1"), st)
	if st == nil || st.Class != "version-gap" {
		t.Errorf("cart-1 not parked at the gap (state %+v); handled %v, want [1] and parked at v3", st, sink.of("cart-1"))
	}
}

// TestAnOwnerLearnsTheVersionOfACopyHandledByAPeer: two instances, A
// owns the only partition. v1 is ingested at A (handled there), v2 at B
// (handled there; its copy, marked, is skipped at A); then v3 arrives
// from Kafka (produced without the ingest). Nothing is missing: A must
// take v2 from the copy it skips, or its table still says 1 and v3 is a
// false gap that parks cart-1.
func TestAnOwnerLearnsTheVersionOfACopyHandledByAPeer(t *testing.T) {
	h, sink, a, b := ownerAndPeer(t, "g-ongap-owner")
	if !ingestValue(t, h, a, "cart-1", wowtest.EventStream("shop", "cart", "cart-1", 1)) {
		t.Fatal("v1 not finished at A")
	}
	if !ingestValue(t, h, b, "cart-1", wowtest.EventStream("shop", "cart", "cart-1", 2)) {
		t.Fatal("v2 not finished at B")
	}
	h.produceState(&kgo.Record{Topic: testTopic, Key: []byte("cart-1"), Value: wowtest.EventStream("shop", "cart", "cart-1", 3)})
	testwait.For(t, 30*time.Second, "everything committed", func() bool { return h.committedAtEnd("g-ongap-owner") })
	st := h.parkedState("cart-1")
	t.Logf("handled %v; parked state %+v", sink.of("cart-1"), st)
	if st != nil || !slices.Equal(sink.of("cart-1"), []int64{1, 2, 3}) {
		t.Errorf("cart-1 parked (state %+v), handled %v; want [1 2 3], not parked: nothing is missing", st, sink.of("cart-1"))
	}
}

// TestIngestOnlyTwoInstancesNoGap: every message ingested, at A (owner)
// and B in turn: v1 at A, v2 at B, v3 at A. Nothing is missing: nothing
// may park, every version handled once.
func TestIngestOnlyTwoInstancesNoGap(t *testing.T) {
	h, sink, a, b := ownerAndPeer(t, "g-ongap-ingest")
	var fin []bool
	fin = append(fin, ingestValue(t, h, a, "cart-1", wowtest.EventStream("shop", "cart", "cart-1", 1)))
	fin = append(fin, ingestValue(t, h, b, "cart-1", wowtest.EventStream("shop", "cart", "cart-1", 2)))
	testwait.For(t, 30*time.Second, "v2's copy committed", func() bool { return h.committedAtEnd("g-ongap-ingest") })
	fin = append(fin, ingestValue(t, h, a, "cart-1", wowtest.EventStream("shop", "cart", "cart-1", 3)))
	testwait.For(t, 30*time.Second, "everything committed", func() bool { return h.committedAtEnd("g-ongap-ingest") })
	st := h.parkedState("cart-1")
	t.Logf("finished locally %v; handled %v; parked state %+v", fin, sink.of("cart-1"), st)
	if st != nil || !slices.Equal(sink.of("cart-1"), []int64{1, 2, 3}) {
		t.Errorf("cart-1 parked (state %+v), handled %v; want [1 2 3], not parked: nothing is missing", st, sink.of("cart-1"))
	}
}

// TestANonOwnerForgetsAVersionItGaveUpAt: two instances, A owns the only
// partition, B none. v1 is ingested at B, v2 at A: B's table, which learns
// only what B handles, still says 1. v3 ingested at B is a gap there,
// given up to A, which handles it (no gap at A). B forgets cart-1's
// version: once v3's copy is handled, v4 ingested at B is handled there,
// not given up as another gap against the stale 1 (for as long as the
// entry would stay, every ingested message of cart-1 at B would be).
func TestANonOwnerForgetsAVersionItGaveUpAt(t *testing.T) {
	h, sink, a, b := ownerAndPeer(t, "g-ongap-forget")
	if !ingestValue(t, h, b, "cart-1", wowtest.EventStream("shop", "cart", "cart-1", 1)) {
		t.Fatal("v1 not finished at B")
	}
	if !ingestValue(t, h, a, "cart-1", wowtest.EventStream("shop", "cart", "cart-1", 2)) {
		t.Fatal("v2 not finished at A")
	}
	if ingestValue(t, h, b, "cart-1", wowtest.EventStream("shop", "cart", "cart-1", 3)) {
		t.Fatal("v3 finished at B: a gap against B's 1 with on-gap park must be given up")
	}
	testwait.For(t, 30*time.Second, "v3's copy committed", func() bool { return h.committedAtEnd("g-ongap-forget") })
	testwait.For(t, 30*time.Second, "B's hold on cart-1 released", func() bool { return !b.heldLocally(testTopic, "cart-1") })
	fin := ingestValue(t, h, b, "cart-1", wowtest.EventStream("shop", "cart", "cart-1", 4))
	testwait.For(t, 30*time.Second, "everything committed", func() bool { return h.committedAtEnd("g-ongap-forget") })
	st := h.parkedState("cart-1")
	t.Logf("v4 finished at B: %v; handled %v; parked state %+v", fin, sink.of("cart-1"), st)
	if !fin {
		t.Error("v4 given up at B: B still takes its stale version for the last one")
	}
	if st != nil || !slices.Equal(sink.of("cart-1"), []int64{1, 2, 3, 4}) {
		t.Errorf("cart-1 parked (state %+v), handled %v; want [1 2 3 4], not parked: nothing is missing", st, sink.of("cart-1"))
	}
}

// TestAFilteredEventIsNoGap: a dispatcher that wants only cart_item_added
// events, with the version check and on-gap park. v2 of cart-1 is another
// event, not for it; v3 follows v2 in the stream: no gap, nothing parked.
// (The check learns the version of an event it does not hand over.)
func TestAFilteredEventIsNoGap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		ev := func(v int64, name string) *kgo.Record {
			val := wowtest.EventStream("shop", "cart", "cart-1", v)
			val = bytes.Replace(val, []byte(`"cart_item_added"`), []byte(`"`+name+`"`), 1)
			return &kgo.Record{Topic: testTopic, Key: []byte("cart-1"), Value: val}
		}
		h.produceState(ev(1, "cart_item_added"), ev(2, "cart_quantity_changed"), ev(3, "cart_item_added"), ev(5, "cart_item_added"))
		sink := &versionSink{got: map[string][]int64{}}
		r := h.receiver("g-ongap-filter", sink, 16, wowOpts, parking, onGapPark, func(o *Options) {
			o.Events = map[string]bool{"cart_item_added": true}
		})
		defer stop(t, r)
		testwait.For(t, 30*time.Second, "v1 and v3 handled", func() bool { return len(sink.of("cart-1")) >= 2 })
		testwait.For(t, 30*time.Second, "cart-1 parked at v5 (4 is missing)", func() bool { return h.parkedState("cart-1") != nil })
		if got := sink.of("cart-1"); !slices.Equal(got, []int64{1, 3}) {
			t.Errorf("handled %v; want [1 3]: v2 is filtered, v3 follows it, v5 parks (v4 missing)", got)
		}
		if st := h.parkedState("cart-1"); st.Offset != 3 {
			t.Errorf("cart-1 parked at offset %d; want 3 (v5, after v4 missing)", st.Offset)
		}
	})
}

// TestAVersionLearntBeforeARebalanceIsNotTrusted: A owns both partitions
// and handles v1, v2 of cart-q (on partition q); B joins and takes q,
// handles v3; B leaves and A takes q again. What A learnt of cart-q under
// its earlier ownership is stale: v4 follows v3, which B handled, not a
// gap after v2. Nothing parks; every version is handled once, in order.
func TestAVersionLearntBeforeARebalanceIsNotTrusted(t *testing.T) {
	h := newHarness(t, 2)
	sink := &versionSink{got: map[string][]int64{}}
	const group = "g-ongap-rebalance"
	a := h.receiver(group, sink, 16, wowOpts, parking, onGapPark)
	defer stop(t, a)
	testwait.For(t, 30*time.Second, "A owning both partitions", func() bool { return a.Ready() && len(a.Partitions()) == 2 })
	ev := func(p int32, v int64) *kgo.Record {
		key := fmt.Sprintf("cart-p%d", p)
		return &kgo.Record{Topic: testTopic, Partition: p, Key: []byte(key), Value: wowtest.EventStream("shop", "cart", key, v)}
	}
	produce := func(recs ...*kgo.Record) {
		t.Helper()
		cl, err := kgo.NewClient(append(brokers(h.c), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(ev(0, 1), ev(0, 2), ev(1, 1), ev(1, 2))
	testwait.For(t, 30*time.Second, "v1, v2 committed", func() bool { return h.committedAtEnd(group) })
	b := h.receiver(group, sink, 16, wowOpts, parking, onGapPark)
	testwait.For(t, 30*time.Second, "B owning a partition", func() bool { return b.Ready() && len(b.Partitions()) == 1 && len(a.Partitions()) == 1 })
	q := b.Partitions()[0].Partition
	produce(ev(q, 3))
	testwait.For(t, 30*time.Second, "v3 committed", func() bool { return h.committedAtEnd(group) })
	stop(t, b)
	testwait.For(t, 30*time.Second, "A owning both partitions again", func() bool { return len(a.Partitions()) == 2 })
	produce(ev(q, 4))
	testwait.For(t, 30*time.Second, "v4 committed", func() bool { return h.committedAtEnd(group) })
	key := fmt.Sprintf("cart-p%d", q)
	if st := h.parkedState(key); st != nil || !slices.Equal(sink.of(key), []int64{1, 2, 3, 4}) {
		t.Errorf("%s parked (state %+v), handled %v; want [1 2 3 4], not parked: nothing is missing", key, st, sink.of(key))
	}
}
