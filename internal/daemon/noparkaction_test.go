package daemon

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/zap/zaptest"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
)

// TestAnActionOnADispatcherThatDoesNotParkAnswers501, as docs/operations.md
// (Operator's view) says and wowd parked exits 2: redrive, skip and discard
// on one answered 404 "not parked", which reads as a wrong aggregate ID.
func TestAnActionOnADispatcherThatDoesNotParkAnswers501(t *testing.T) {
	c := newCluster(t, kfake.SeedTopics(1, "wow.example.cart.event"), kfake.AllowAutoTopicCreation())
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
      on-failure: dead-letter
      handler: {type: ok}
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
	for _, a := range []string{"park", "redrive", "skip", "discard"} {
		resp, err := http.Post("http://"+rt.AdminAddr()+"/admin/v1/dispatchers/projection/aggregates/cart-9/"+a, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotImplemented {
			t.Errorf("%s on a dispatcher that does not park: %d (%s), want 501", a, resp.StatusCode, b)
		}
	}
}
