package daemon

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zaptest"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
	"github.com/wowd/wowd/internal/kfaketest"
	"github.com/wowd/wowd/internal/park"
)

// TestAdminParkByHandWithoutTopicsIsNotFound: park by hand writes a
// request for each topic of the dispatcher that exists; with none
// existing (a context deployed before its topics) it wrote nothing and
// answered 202 all the same, so the page said "requested" and the
// aggregate's messages, once its topic came, were handled.
func TestAdminParkByHandWithoutTopicsIsNotFound(t *testing.T) {
	c := newCluster(t) // no topic, none created on a fetch
	rt := parkingDaemon(t, fmt.Sprintf(`
wow:
  service: carts
  kafka:
    bootstrap-servers: [%s]
  contexts:
    example-service:
      alias: example
      aggregates: [cart]
  dispatchers:
    projection:
      topics: [event]
      handler: {type: ok}
  metrics:
    listen: 127.0.0.1:0
  admin:
    listen: 127.0.0.1:0
`, c.ListenAddrs()[0]))
	code, body := parkByHand(t, rt, "projection", "cart-1")
	if code != http.StatusNotFound || !strings.Contains(body, "wow.example.cart.event") {
		t.Fatalf("park by hand with no topic of the dispatcher: %d %s, want 404 naming its topics", code, body)
	}
}

// TestAdminParkByHandAsksNothingWhenATopicCannotBeListed: a dispatcher
// over two contexts has a receiver each; with one context's topic listed
// with an error (its leader moving), a park by hand answered 202 after
// asking on the other context's topic alone. It answers 500 naming the
// topic now, and asks on neither.
func TestAdminParkByHandAsksNothingWhenATopicCannotBeListed(t *testing.T) {
	const cartTopic, invoiceTopic = "wow.example.cart.event", "wow.billing.invoice.event"
	c := newCluster(t, kfake.SeedTopics(1, cartTopic, invoiceTopic))
	// Only a listing of the invoice topic alone: the billing client's own
	// requests (its topic and the state topic) are answered as they are,
	// so that it starts.
	kfaketest.Leaderless(c, invoiceTopic, func(req *kmsg.MetadataRequest) bool { return len(req.Topics) == 1 })
	rt := parkingDaemon(t, fmt.Sprintf(`
wow:
  service: carts
  kafka:
    bootstrap-servers: [%s]
  contexts:
    example-service:
      alias: example
      aggregates: [cart]
    billing-service:
      alias: billing
      aggregates: [invoice]
  dispatchers:
    projection:
      topics: [event]
      contexts: [example-service, billing-service] # the cart receiver first: it asked before the other failed
      handler: {type: ok}
  metrics:
    listen: 127.0.0.1:0
  admin:
    listen: 127.0.0.1:0
`, c.ListenAddrs()[0]))
	if n := len(rt.receivers); n != 2 {
		t.Fatalf("%d receivers, want one per context", n)
	}
	code, body := parkByHand(t, rt, "projection", "cart-1")
	if code != http.StatusInternalServerError || !strings.Contains(body, invoiceTopic) {
		t.Fatalf("park by hand with %s not listable: %d %s, want 500 naming it", invoiceTopic, code, body)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// Requests only: the receivers write their parking owner records to
	// the same topic as they are assigned, whenever that is.
	book, err := park.ReadBook(context.Background(), []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, kadm.NewClient(cl),
		park.StateTopic("carts", "projection"))
	if err != nil {
		t.Fatal(err)
	}
	if reqs := book.AllRequests(); len(reqs) > 0 {
		t.Errorf("%d requests in the state topic, want none asked: %v", len(reqs), slices.Collect(maps.Keys(reqs)))
	}
}

// parkingDaemon starts a daemon from the configuration yaml, with the
// handler type ok (every message handled), stopped at the end of the test.
func parkingDaemon(t *testing.T, yaml string) *Daemon {
	t.Helper()
	return daemonWith(t, yaml, handler.Spec{Name: "ok", New: func(any, handler.Deps) (handler.Handler, error) {
		return handler.Sync(func(context.Context, *handler.Message) error { return nil }), nil
	}})
}

// daemonWith starts a daemon from the configuration yaml, with the handler
// type spec registered, stopped at the end of the test.
func daemonWith(t *testing.T, yaml string, spec handler.Spec) *Daemon {
	t.Helper()
	var reg handler.Registry
	reg.Register(spec)
	cfg, err := config.Parse([]byte(yaml), "test.yaml", &reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := New(cfg, &reg, zaptest.NewLogger(t), "test")
	if err != nil {
		t.Fatal(err)
	}
	rt.Start(context.Background())
	t.Cleanup(func() { stopRT(t, rt) })
	return rt
}

// parkByHand asks rt's admin API to park aggregate id of dispatcher d by
// hand, and returns the answer's status and body.
func parkByHand(t *testing.T, rt *Daemon, d, id string) (int, string) {
	t.Helper()
	return adminAction(t, rt, d, id, "park")
}

// adminAction asks rt's admin API for action (park, redrive, skip,
// discard) on aggregate id of dispatcher d, and returns the answer's
// status and body.
func adminAction(t *testing.T, rt *Daemon, d, id, action string) (int, string) {
	t.Helper()
	resp, err := http.Post("http://"+rt.AdminAddr()+"/admin/v1/dispatchers/"+d+"/aggregates/"+id+"/"+action, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
