package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
	"github.com/wowd/wowd/internal/testwait"
)

// A skip or discard writes to the dead-letter topic. With the dispatcher's
// dead letters off, its owner would refuse the request and leave the
// aggregate parked; the admin API must say so at once (501, as `wowd
// parked` does with exit 2) rather than answer 202 for an action that
// never happens. A redrive needs no dead letters and is still asked.
func TestAdminRefusesSkipAndDiscardWithoutDeadLetters(t *testing.T) {
	const topic = "wow.example.cart.event"
	c := newCluster(t, kfake.SeedTopics(1, topic), kfake.AllowAutoTopicCreation())
	var reg handler.Registry
	reg.Register(handler.Spec{Name: "refuses", New: func(any, handler.Deps) (handler.Handler, error) {
		return handler.Sync(func(context.Context, *handler.Message) error {
			return handler.Classed(handler.Permanent, errors.New("rejected"))
		}), nil
	}})
	cfg, err := config.Parse(fmt.Appendf(nil, `
wow:
  service: carts
  kafka:
    bootstrap-servers: [%s]
    heartbeat-interval: 200ms
  contexts:
    example-service:
      alias: example
      aggregates: [cart]
  dispatchers:
    projection:
      topics: [event]
      on-failure: park
      dead-letter: {enabled: false}
      handler: {type: refuses}
  metrics:
    listen: ""
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
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Key: []byte("cart-9"), Value: event("cart-9-0", "cart-9", "")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	base := "http://" + rt.AdminAddr() + "/admin/v1"
	parked := func() (ids []string) {
		resp, err := http.Get(base + "/status")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st struct {
			Parked struct{ Aggregates []struct{ ID string } }
		}
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		for _, a := range st.Parked.Aggregates {
			ids = append(ids, a.ID)
		}
		return ids
	}
	testwait.For(t, 20*time.Second, "cart-9 parked", func() bool { return slices.Equal(parked(), []string{"cart-9"}) })
	act := func(action string) (int, string) {
		resp, err := http.Post(base+"/dispatchers/projection/aggregates/cart-9/"+action, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, action := range []string{"skip", "discard"} {
		if code, body := act(action); code != http.StatusNotImplemented || !strings.Contains(body, "dead-letter") {
			t.Errorf("%s with dead letters off: %d %s, want 501 naming the dead-letter setting", action, code, body)
		}
	}
	if code, body := act("redrive"); code != http.StatusAccepted {
		t.Errorf("redrive with dead letters off: %d %s, want 202", code, body)
	}
}
