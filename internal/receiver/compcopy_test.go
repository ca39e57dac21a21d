package receiver

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/internal/testwait"
	"github.com/wowd/wowd/internal/wow/wowtest"
)

// TestACompensationsCopyTeachesTheVersionCheckNothing: the marked copy of an event
// stream resent as a compensation (an earlier version, on purpose) and
// handled where it was ingested teaches the version check its old version
// (before the fix copyVersion did not leave compensations out), so the
// aggregate's next real version after it is taken for a gap: with on-gap
// park the aggregate parks though nothing is missing.
//
// The group handled v1..v4 of cart-1 and committed them; then a
// compensation of v2 for this dispatcher was ingested and handled by an
// instance of the service (its copy marked handled by svc/d), and v5 came.
// A new incarnation of the partition (here a restart) reads the copy, then
// v5: v5 follows v4 and must be handled.
func TestACompensationsCopyTeachesTheVersionCheckNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		const group = "g-comp-copy"
		produceVersions(t, h, "cart-1", 1, 2, 3, 4)
		sink := &versionSink{got: map[string][]int64{}}
		r := h.receiver(group, sink, 16, wowOpts, parking, onGapPark)
		testwait.For(t, 30*time.Second, "v1..v4 finished", func() bool { return h.committedAtEnd(group) })
		stop(t, r)

		cl, err := kgo.NewClient(brokers(h.c)...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		marked := []kgo.RecordHeader{{Key: HeaderHandledBy, Value: []byte("svc")}, {Key: HeaderHandledDispatchers, Value: []byte("d")}}
		for _, rec := range []*kgo.Record{
			{Topic: testTopic, Key: []byte("cart-1"), Value: compensated("cart-1", 2, "svc", "d"), Headers: marked},
			{Topic: testTopic, Key: []byte("cart-1"), Value: wowtest.EventStream("shop", "cart", "cart-1", 5)},
		} {
			if err := cl.ProduceSync(t.Context(), rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}

		sink2 := &versionSink{got: map[string][]int64{}}
		r2 := h.receiver(group, sink2, 16, wowOpts, parking, onGapPark)
		testwait.For(t, 30*time.Second, "the copy and v5 finished", func() bool { return h.committedAtEnd(group) })
		if got, want := sink2.of("cart-1"), []int64{5}; !slices.Equal(got, want) {
			t.Errorf("after the compensation's copy, handled versions %v, want %v (v5 follows v4: no gap)", got, want)
		}
		if st := h.parkedState("cart-1"); st != nil {
			t.Errorf("cart-1 parked (class %s: %s) though no version is missing", st.Class, st.Reason)
		}
		stop(t, r2)
	})
}
