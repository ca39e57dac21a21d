package daemon

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
)

// TestAdminParkByHandWithoutTopicsIsNotFound: park by hand writes a
// request for each topic of the dispatcher that exists; with none
// existing (a context deployed before its topics) it wrote nothing and
// answered 202 all the same, so the page said "requested" and the
// aggregate's messages, once its topic came, were handled.
func TestAdminParkByHandWithoutTopicsIsNotFound(t *testing.T) {
	c := newCluster(t) // no topic, none created on a fetch
	var reg handler.Registry
	reg.Register(handler.Spec{Name: "ok", New: func(any, handler.Deps) (handler.Handler, error) {
		return handler.Sync(func(context.Context, *handler.Message) error { return nil }), nil
	}})
	cfg, err := config.Parse(fmt.Appendf(nil, `
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
	resp, err := http.Post("http://"+rt.AdminAddr()+"/admin/v1/dispatchers/projection/aggregates/cart-1/park", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "wow.example.cart.event") {
		t.Fatalf("park by hand with no topic of the dispatcher: %d %s, want 404 naming its topics", resp.StatusCode, body)
	}
}
