package daemon

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
	"github.com/wowd/wowd/internal/handlers"
	"github.com/wowd/wowd/internal/testwait"
)

// A stop that ends past wow.shutdown.timeout with every message finished
// and committed (its final commit or leave used the time given past the
// deadline) is no failure, whatever the handler: with the http sink Stop
// returned "requests in flight canceled" with no request in flight (its
// idle workers had not returned yet), and wowd exited 1 after a clean
// drain and commit. Found by review.
func TestACleanStopPastItsDeadlineIsNoFailure(t *testing.T) {
	for _, typ := range []string{"log", "http"} {
		t.Run(typ, func(t *testing.T) { testCleanStopPastDeadline(t, typ) })
	}
}

func testCleanStopPastDeadline(t *testing.T, typ string) {
	const topic = "wow.example.cart.event"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic, topic+".dlq"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var hits atomic.Int64
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(sink.Close)

	var reg handler.Registry
	handlers.Register(&reg)
	h := "type: log"
	if typ == "http" {
		h = "type: http\n        url: " + sink.URL
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
      on-failure: dead-letter
      handler:
        %s
  metrics:
    listen: ""
`, c.ListenAddrs()[0], h), "test.yaml", &reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := New(cfg, &reg, zaptest.NewLogger(t), "test")
	if err != nil {
		t.Fatal(err)
	}
	rt.Start(context.Background())
	testwait.For(t, 20*time.Second, "the receiver joined", func() bool { ok, _ := rt.Ready(); return ok })

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const n = 5
	var recs []*kgo.Record
	for i := range n {
		id := "cart-" + strconv.Itoa(i)
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(id), Value: event("m-"+id, id, "")})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	group := cfg.GroupID("projection", "example")
	testwait.For(t, 20*time.Second, "every record committed", func() bool {
		offs, err := adm.FetchOffsets(context.Background(), group)
		if err != nil {
			return false
		}
		o, ok := offs.Lookup(topic, 0)
		return ok && o.At == n
	})
	if typ == "http" && hits.Load() < n {
		t.Fatalf("sink got %d requests, want %d", hits.Load(), n)
	}
	for _, r := range rt.receivers {
		if r.InFlight() != 0 {
			t.Fatalf("receiver has %d in flight before the stop", r.InFlight())
		}
	}

	// The deadline has passed by the time the handlers are closed: nothing
	// is unfinished and everything is committed.
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
	defer cancel()
	if err := rt.Stop(ctx); err != nil {
		t.Errorf("Stop after a clean drain and commit (handler %s): %v; want nil (exit 0), as with the other handler type", typ, err)
	}
}
