package receiver

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/testwait"
	"github.com/wowd/wowd/internal/wow/wowtest"
)

// produceVersions writes event streams of aggregate key with the given
// versions, in order.
func produceVersions(t *testing.T, h *harness, key string, vs ...int64) {
	t.Helper()
	cl, err := kgo.NewClient(brokers(h.c)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, v := range vs {
		rec := &kgo.Record{Topic: testTopic, Key: []byte(key), Value: wowtest.EventStream("shop", "cart", key, v)}
		if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// versionSink records the versions it is given per aggregate.
type versionSink struct {
	mu  sync.Mutex
	got map[string][]int64
}

func (s *versionSink) Handle(_ context.Context, m *handler.Message, ack handler.Ack) {
	s.mu.Lock()
	s.got[m.AggregateID] = append(s.got[m.AggregateID], m.Wow.Version)
	s.mu.Unlock()
	ack.Done(nil)
}

func (s *versionSink) of(key string) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got[key])
}

func wowOpts(o *Options) { o.Wow, o.VersionCheck = true, true }

// TestVersionCheck: a version already handled is skipped as a duplicate; a
// gap is handled and counted with on-gap log, and parks the aggregate at it
// with on-gap park, where a redrive hands it over despite the gap.
func TestVersionCheck(t *testing.T) {
	t.Run("log", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := newVirtualHarness(t, 1)
			produceVersions(t, h, "cart-1", 1, 2, 3, 3, 2, 5, 6)
			sink := &versionSink{got: map[string][]int64{}}
			r := h.receiver("g-version", sink, 16, wowOpts)
			testwait.For(t, 30*time.Second, "every record finished", func() bool { return h.committedAtEnd("g-version") })
			if got, want := sink.of("cart-1"), []int64{1, 2, 3, 5, 6}; !slices.Equal(got, want) {
				t.Fatalf("handled versions %v, want %v", got, want)
			}
			stop(t, r)
		})
	})
	t.Run("park", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := newVirtualHarness(t, 1)
			produceVersions(t, h, "cart-1", 1, 2, 4, 5)
			produceVersions(t, h, "cart-2", 1, 2, 3)
			sink := &versionSink{got: map[string][]int64{}}
			r := h.receiver("g-version-park", sink, 16, wowOpts, parking, func(o *Options) { o.OnGapPark = true })
			testwait.For(t, 30*time.Second, "every record finished", func() bool { return h.committedAtEnd("g-version-park") })
			if got, want := sink.of("cart-1"), []int64{1, 2}; !slices.Equal(got, want) {
				t.Fatalf("cart-1 handled versions %v, want %v: parked at the gap", got, want)
			}
			if got, want := sink.of("cart-2"), []int64{1, 2, 3}; !slices.Equal(got, want) {
				t.Fatalf("cart-2 handled versions %v, want %v", got, want)
			}
			st := h.parkedState("cart-1")
			if st == nil || st.Class != "version-gap" {
				t.Fatalf("cart-1 parked state %+v, want class version-gap", st)
			}
			h.ask("cart-1", "redrive")
			testwait.For(t, 30*time.Second, "cart-1 redriven", func() bool { return len(sink.of("cart-1")) == 4 })
			if got, want := sink.of("cart-1"), []int64{1, 2, 4, 5}; !slices.Equal(got, want) {
				t.Fatalf("cart-1 handled versions %v, want %v after the redrive", got, want)
			}
			stop(t, r)
		})
	})
}
