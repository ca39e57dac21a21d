package receiver

import (
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/internal/testwait"
	"github.com/wowd/wowd/internal/wow/wowtest"
)

// onGapPark sets the version check's on-gap policy to park.
func onGapPark(o *Options) { o.OnGapPark = true }

// TestAnOwnerLearnsTheVersionOfACopyHandledByAPeer: two instances, A
// owns the only partition. v1 is ingested at A (handled there), v2 at B
// (handled there; its copy, marked, is skipped at A); then v3 arrives
// from Kafka (produced without the ingest). Nothing is missing: A must
// take v2 from the copy it skips, or its table still says 1 and v3 is a
// false gap that parks cart-1.
func TestAnOwnerLearnsTheVersionOfACopyHandledByAPeer(t *testing.T) {
	h := newHarness(t, 1)
	sink := &versionSink{got: map[string][]int64{}}
	a := h.receiver("g-ongap-owner", sink, 16, wowOpts, parking, onGapPark)
	defer stop(t, a)
	testwait.For(t, 30*time.Second, "A ready and owning the partition", func() bool { return a.Ready() && len(a.Partitions()) == 1 })
	b := h.receiver("g-ongap-owner", sink, 16, wowOpts, parking, onGapPark)
	defer stop(t, b)
	testwait.For(t, 30*time.Second, "B ready", b.Ready)
	if len(b.Partitions()) != 0 {
		t.Skip("B took the partition")
	}
	testwait.For(t, 30*time.Second, "the start barriers read", func() bool {
		return !a.heldLocally(testTopic, "cart-1") && !b.heldLocally(testTopic, "cart-1")
	})
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
