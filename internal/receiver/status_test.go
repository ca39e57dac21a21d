package receiver

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/testwait"
)

// holdingHandler acknowledges every message at once, except those of one
// aggregate, which it keeps until released.
type holdingHandler struct {
	key     string
	mu      sync.Mutex
	held    []handler.Ack
	release bool
}

func (h *holdingHandler) Handle(_ context.Context, m *handler.Message, ack handler.Ack) {
	h.mu.Lock()
	if m.AggregateID == h.key && !h.release {
		h.held = append(h.held, ack)
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	ack.Done(nil)
}

func (h *holdingHandler) letGo() {
	h.mu.Lock()
	held := h.held
	h.held, h.release = nil, true
	h.mu.Unlock()
	for _, a := range held {
		a.Done(nil)
	}
}

// TestStatusNamesTheStuckAggregate: an aggregate whose handler does not
// finish is the hottest and the oldest, its partition's commit stays behind
// its end; the membership and partitions are reported; once it finishes it
// is neither.
func TestStatusNamesTheStuckAggregate(t *testing.T) {
	h := newHarness(t, 2)
	produce(t, h.c, testTopic, 200, 10) // agg-0 … agg-9, 20 records each
	hd := &holdingHandler{key: "agg-0"}
	r := h.receiver("g-status", hd, 64)
	defer stop(t, r)

	var s Status
	// A status is not one atomic snapshot: while the group settles (kfake
	// may rebalance right after the first join), the executor can still
	// hold tasks of a revoked incarnation that no longer count in flight.
	// So the wait is for a status that holds together.
	testwait.For(t, 30*time.Second, "agg-0 hot and oldest, counted in flight", func() bool {
		s = r.Status(5)
		return len(s.Hot) > 0 && s.Hot[0].ID == "agg-0" && s.Hot[0].Unfinished >= 4 &&
			len(s.Oldest) > 0 && s.Oldest[0].ID == "agg-0" && s.InFlight >= s.Hot[0].Unfinished &&
			len(s.Partitions) == 2 && s.Partitions[s.Oldest[0].Partition].Unfinished > 0
	})
	if s.Dispatcher != "d" || s.Context != "shop" || s.GroupID != "g-status" || !s.Joined || s.MemberID == "" || s.Generation < 1 {
		t.Errorf("membership %+v", s)
	}
	if s.MaxInFlight != 64 || s.InFlight < s.Hot[0].Unfinished {
		t.Errorf("in flight %d of %d, with %d of agg-0", s.InFlight, s.MaxInFlight, s.Hot[0].Unfinished)
	}
	if s.Hot[0].Aggregate != "cart" || s.Oldest[0].Aggregate != "cart" || s.Oldest[0].Topic != testTopic || s.Oldest[0].Timestamp.IsZero() {
		t.Errorf("hot %+v, oldest %+v", s.Hot[0], s.Oldest[0])
	}
	if len(s.Hot) > 5 || len(s.Oldest) > 5 {
		t.Errorf("%d hot and %d oldest, asked for 5", len(s.Hot), len(s.Oldest))
	}
	if len(s.Partitions) != 2 {
		t.Fatalf("partitions %+v", s.Partitions)
	}
	stuck := s.Partitions[s.Oldest[0].Partition]
	if stuck.HighWatermark <= 0 || stuck.Committed > s.Oldest[0].Offset || stuck.Unfinished == 0 {
		t.Errorf("the stuck partition %+v: committed past its oldest unfinished record %d, or nothing unfinished", stuck, s.Oldest[0].Offset)
	}

	hd.letGo()
	testwait.For(t, 30*time.Second, "agg-0 finished", func() bool {
		s = r.Status(5)
		return s.InFlight == 0 && len(s.Hot) == 0 && len(s.Oldest) == 0
	})
}
