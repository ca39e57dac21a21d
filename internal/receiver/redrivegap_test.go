package receiver

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/park"
	"github.com/wowd/wowd/internal/testwait"
)

// failingVersionSink records the versions it handles per aggregate and
// fails permanently the version fail names while failing is set.
type failingVersionSink struct {
	mu      sync.Mutex
	got     map[string][]int64
	fail    int64
	failing atomic.Bool
}

func (s *failingVersionSink) Handle(_ context.Context, m *handler.Message, ack handler.Ack) {
	if s.failing.Load() && m.Wow.Version == s.fail {
		ack.Done(handler.Classed(handler.Permanent, context.DeadlineExceeded))
		return
	}
	s.mu.Lock()
	s.got[m.AggregateID] = append(s.got[m.AggregateID], m.Wow.Version)
	s.mu.Unlock()
	ack.Done(nil)
}

func (s *failingVersionSink) of(key string) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got[key])
}

// TestARedriveParksAgainAtAGapBehindItsHead: on-gap park. cart-1's
// v3 fails for good and parks the aggregate; v4, v6 and v7 follow it into
// the parked topic unchecked (v5 is missing: a real gap). The operator
// fixes the handler and redrives the failure at the head. The redrive
// handed v6 over "anyway", as if the operator had decided about that gap
// too (found by review): v6 and v7 were applied without v5. A message
// behind the head that fails parks the aggregate again with it at the
// head, and so does a gap behind the head now; a second redrive, the
// operator's decision about that gap, hands it over.
func TestARedriveParksAgainAtAGapBehindItsHead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		const group = "g-redrive-gap"
		produceVersions(t, h, "cart-1", 1, 2, 3, 4, 6, 7)
		sink := &failingVersionSink{got: map[string][]int64{}, fail: 3}
		sink.failing.Store(true)
		r := h.receiver(group, sink, 16, wowOpts, parking, onGapPark)
		defer stop(t, r)
		testwait.For(t, 30*time.Second, "every record finished", func() bool { return h.committedAtEnd(group) })
		if st := h.parkedState("cart-1"); st == nil || st.Class == "version-gap" {
			t.Fatalf("cart-1 parked state %+v; want parked at v3's failure", st)
		}
		if got, want := sink.of("cart-1"), []int64{1, 2}; !slices.Equal(got, want) {
			t.Fatalf("handled %v before the redrive, want %v", got, want)
		}
		sink.failing.Store(false) // the cause of v3's failure fixed
		h.ask("cart-1", park.Redrive)
		testwait.For(t, 30*time.Second, "the redrive request answered", func() bool {
			st := h.parkedState("cart-1")
			return st == nil || st.Request == nil
		})
		st := h.parkedState("cart-1")
		t.Logf("after the redrive: handled %v; parked state %+v", sink.of("cart-1"), st)
		if got, want := sink.of("cart-1"), []int64{1, 2, 3, 4}; !slices.Equal(got, want) {
			t.Errorf("handled %v; want %v: v6 follows a missing v5 and must not reach the handler (on-gap: park)", got, want)
		}
		if st == nil || st.Class != "version-gap" {
			t.Fatalf("cart-1 parked state %+v; want parked again at v6's gap (class version-gap)", st)
		}
		// The operator decides about the gap: a redrive hands v6 over
		// (the head it parked at) and the rest after it.
		h.ask("cart-1", park.Redrive)
		testwait.For(t, 30*time.Second, "cart-1 unparked", func() bool { return h.parkedState("cart-1") == nil })
		if got, want := sink.of("cart-1"), []int64{1, 2, 3, 4, 6, 7}; !slices.Equal(got, want) {
			t.Errorf("after the second redrive handled %v; want %v", got, want)
		}
	})
}
