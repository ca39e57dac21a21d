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
// aggregate's messages in order and unparks it. Asking again answers 404;
// parking by hand answers 501.
func TestAdminActsOnParkedAggregates(t *testing.T) {
	const topic = "wow.example.cart.event"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
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
	rt.Start()
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
	if code := act("park"); code != http.StatusNotImplemented {
		t.Fatalf("park by hand answered %d, want 501", code)
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
