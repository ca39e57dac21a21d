package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
	"github.com/wowd/wowd/internal/testwait"
)

// TestAdminActsOnParkedAggregates: a Wow dispatcher parks (the default) an
// aggregate whose message fails for good; the admin API lists it, and a
// redrive from it, once the handler accepts the message, hands over the
// aggregate's messages in order and unparks it; asking again answers 404.
// An aggregate parked by hand holds its next messages until redriven.
func TestAdminActsOnParkedAggregates(t *testing.T) {
	const topic = "wow.example.cart.event"
	c := newCluster(t, kfake.SeedTopics(2, topic), kfake.AllowAutoTopicCreation())
	var broken atomic.Bool
	broken.Store(true)
	var mu sync.Mutex
	got := map[string][]string{}
	var reg handler.Registry
	reg.Register(handler.Spec{Name: "flaky", New: func(any, handler.Deps) (handler.Handler, error) {
		return handler.Sync(func(_ context.Context, m *handler.Message) error {
			if broken.Load() && m.AggregateID == "cart-9" {
				return handler.Classed(handler.Permanent, errors.New("rejected"))
			}
			mu.Lock()
			got[m.AggregateID] = append(got[m.AggregateID], m.Wow.ID)
			mu.Unlock()
			return nil
		}), nil
	}})
	handled := func(agg string) []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got[agg])
	}
	cfg, err := config.Parse(fmt.Appendf(nil, `
wow:
  service: carts
  kafka:
    bootstrap-servers: [%s]
    commit-interval: 100ms
    heartbeat-interval: 200ms
  contexts:
    example-service:
      alias: example
      aggregates: [cart]
  dispatchers:
    projection:
      topics: [event]
      handler: {type: flaky}
  metrics:
    listen: 127.0.0.1:0
  admin:
    listen: 127.0.0.1:0
`, c.ListenAddrs()[0]), "test.yaml", &reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := New(cfg, &reg, zaptest.NewLogger(t), "test")
	if err != nil {
		t.Fatal(err)
	}
	rt.Start(context.Background())
	defer stopRT(t, rt)

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var want []string
	for i := range 6 {
		for _, agg := range []string{"cart-9", "cart-1"} {
			id := fmt.Sprintf("%s-%d", agg, i)
			if agg == "cart-9" {
				want = append(want, id)
			}
			if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Key: []byte(agg), Value: event(id, agg, "")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	base := "http://" + rt.AdminAddr() + "/admin/v1"
	parkedIDs := func() []string {
		resp, err := http.Get(base + "/status")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st struct {
			Parked struct {
				Available  bool
				Aggregates []struct{ ID, Dispatcher, Reason string }
			}
		}
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		if !st.Parked.Available {
			t.Fatal("status: parked aggregates not available")
		}
		var ids []string
		for _, a := range st.Parked.Aggregates {
			ids = append(ids, a.Dispatcher+"/"+a.ID)
		}
		return ids
	}
	testwait.For(t, 20*time.Second, "cart-1 handled and cart-9 parked", func() bool {
		return len(handled("cart-1")) == 6 && slices.Equal(parkedIDs(), []string{"projection/cart-9"})
	})
	if h := handled("cart-9"); len(h) != 0 {
		t.Fatalf("cart-9 handled %v while parked", h)
	}
	act := func(action string) int {
		resp, err := http.Post(base+"/dispatchers/projection/aggregates/cart-9/"+action, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// Parking by hand: cart-1's next messages wait until redriven.
	resp, err := http.Post(base+"/dispatchers/projection/aggregates/cart-1/park", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("park by hand answered %d, want 202", resp.StatusCode)
	}
	testwait.For(t, 20*time.Second, "cart-1 parked by hand", func() bool {
		return slices.Equal(parkedIDs(), []string{"projection/cart-1", "projection/cart-9"}) ||
			slices.Equal(parkedIDs(), []string{"projection/cart-9", "projection/cart-1"})
	})
	for i := range 3 {
		id := fmt.Sprintf("cart-1-late-%d", i)
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Key: []byte("cart-1"), Value: event(id, "cart-1", "")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(500 * time.Millisecond) // commits every 100ms: the late ones are parked, not handled
	if h := handled("cart-1"); len(h) != 6 {
		t.Fatalf("cart-1 handled %v after it was parked by hand", h)
	}
	post := func(agg, action string) int {
		resp, err := http.Post(base+"/dispatchers/projection/aggregates/"+agg+"/"+action, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("cart-1", "redrive"); code != http.StatusAccepted {
		t.Fatalf("redrive of cart-1 answered %d, want 202", code)
	}
	testwait.For(t, 20*time.Second, "cart-1's late messages handled in order", func() bool { return len(handled("cart-1")) == 9 })
	if h := handled("cart-1"); !slices.Equal(h[6:], []string{"cart-1-late-0", "cart-1-late-1", "cart-1-late-2"}) {
		t.Fatalf("cart-1 handled %v", h)
	}
	broken.Store(false)
	if code := act("redrive"); code != http.StatusAccepted {
		t.Fatalf("redrive answered %d, want 202", code)
	}
	testwait.For(t, 20*time.Second, "cart-9 redriven and unparked", func() bool {
		return len(handled("cart-9")) == len(want) && len(parkedIDs()) == 0
	})
	if h := handled("cart-9"); !slices.Equal(h, want) {
		t.Fatalf("cart-9 handled %v, want %v", h, want)
	}
	if code := act("redrive"); code != http.StatusNotFound {
		t.Fatalf("redrive of an aggregate not parked answered %d, want 404", code)
	}
}
