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

// TestAnOwnerBehindItsIngestSeesNoGap: the same through the receiver. One
// instance owns the only partition, on-gap park; v1..v3 of a new aggregate
// are ingested and handled there, and the owner reads v1's marked copy
// before the others are published (its consumption behind the ingest).
// v4, ingested next with nothing missing, was given up as a gap. Found by
// a review.
func TestAnOwnerBehindItsIngestSeesNoGap(t *testing.T) {
	h := newHarness(t, 1)
	sink := &versionSink{got: map[string][]int64{}}
	r := h.receiver("g-owner-behind-ingest", sink, 16, wowOpts, parking, onGapPark)
	defer stop(t, r)
	testwait.For(t, 30*time.Second, "ready and owning", func() bool { return r.Ready() && len(r.Partitions()) == 1 })
	testwait.For(t, 30*time.Second, "barrier read", func() bool { return !r.heldLocally(testTopic, "cart-1") })
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	marked := []kgo.RecordHeader{{Key: HeaderHandledBy, Value: []byte("svc")}, {Key: HeaderHandledDispatchers, Value: []byte("d")}}
	var adm []Admitted
	for v := int64(1); v <= 3; v++ {
		a, err := r.Admit(context.Background(), &kgo.Record{Topic: testTopic, Key: []byte("cart-1"), Value: wowtest.EventStream("shop", "cart", "cart-1", v)})
		if err != nil {
			t.Fatal(err)
		}
		<-a.Done()
		if !a.Finished() {
			t.Fatalf("v%d not finished locally", v)
		}
		adm = append(adm, a)
	}
	publish := func(i int) {
		res := cl.ProduceSync(context.Background(), &kgo.Record{Topic: testTopic, Key: []byte("cart-1"),
			Value: wowtest.EventStream("shop", "cart", "cart-1", int64(i+1)), Headers: marked})
		if err := res.FirstErr(); err != nil {
			t.Fatal(err)
		}
		adm[i].Published(res[0].Record.Partition, res[0].Record.Offset)
	}
	publish(0)
	testwait.For(t, 30*time.Second, "v1's copy committed", func() bool { return h.committedAtEnd("g-owner-behind-ingest") })
	publish(1)
	publish(2)
	fin := ingestValue(t, h, r, "cart-1", wowtest.EventStream("shop", "cart", "cart-1", 4))
	testwait.For(t, 30*time.Second, "everything committed", func() bool { return h.committedAtEnd("g-owner-behind-ingest") })
	if !fin {
		t.Errorf("v4 given up as a gap though 1..3 were all handled here")
	}
	if !slices.Equal(sink.of("cart-1"), []int64{1, 2, 3, 4}) {
		t.Errorf("handled %v", sink.of("cart-1"))
	}
}
