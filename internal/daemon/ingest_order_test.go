package daemon

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/testwait"
)

// TestIngestKeepsAnAggregatesOrderWhenOneIsGivenUp: m0 fails for good when
// it is handled locally: the receiver gives it up and the ingest publishes
// it for the owner of its partition, here the same instance, whose handler
// takes half a second with it. The caller sends m1, of the same aggregate,
// at once after m0's answer: the receiver gives it up too (m0's copy is
// not committed yet), so the handler sees m0 (its copy), then m1; and once
// both are committed, m2 is handled locally again.
func TestIngestKeepsAnAggregatesOrderWhenOneIsGivenUp(t *testing.T) {
	c := newCluster(t, kfake.SeedTopics(1, "wow.example.cart.event"))
	var (
		mu    sync.Mutex
		order []string
		tries = map[string]int{}
	)
	seen := func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(order) }
	var reg handler.Registry
	reg.Register(handler.Spec{Name: "count", New: func(any, handler.Deps) (handler.Handler, error) {
		return handler.Sync(func(_ context.Context, m *handler.Message) error {
			mu.Lock()
			tries[m.Wow.ID]++
			n := tries[m.Wow.ID]
			mu.Unlock()
			if m.Wow.ID == "m0" {
				if n == 1 {
					if m.Partition != -1 || m.Offset != -1 {
						t.Errorf("m0 handled locally at partition %d offset %d, want -1 -1 (no position yet)", m.Partition, m.Offset)
					}
					return handler.Classed(handler.Permanent, errors.New("rejected once"))
				}
				time.Sleep(500 * time.Millisecond)
			}
			mu.Lock()
			order = append(order, m.Wow.ID)
			mu.Unlock()
			return nil
		}), nil
	}})
	rt := startInstance(t, c, &reg)
	defer stopRT(t, rt)
	for _, id := range []string{"m0", "m1"} {
		if code := post(t, rt.MetricsAddr(), event(id, "cart-1", "")); code != http.StatusAccepted {
			t.Fatalf("%s answered %d", id, code)
		}
	}
	testwait.For(t, 20*time.Second, "m0 and m1 handled", func() bool { return len(seen()) >= 2 })
	if got := seen(); !slices.Equal(got, []string{"m0", "m1"}) {
		t.Fatalf("handled %v, want [m0 m1]: m1 ran ahead of m0's copy", got)
	}
	testwait.For(t, 20*time.Second, "the copies committed", func() bool {
		return rt.receivers[0].Snapshot().IngestHeld == 0
	})
	if code := post(t, rt.MetricsAddr(), event("m2", "cart-1", "")); code != http.StatusAccepted {
		t.Fatalf("m2 answered %d", code)
	}
	if got := seen(); !slices.Equal(got, []string{"m0", "m1", "m2"}) {
		t.Fatalf("handled %v when m2 was answered, want [m0 m1 m2]: m2 handled locally", got)
	}
}
