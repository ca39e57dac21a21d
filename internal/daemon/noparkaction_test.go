package daemon

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// TestAnActionOnADispatcherThatDoesNotParkAnswers501, as docs/operations.md
// (Operator's view) says and wowd parked exits 2: redrive, skip and discard
// on one answered 404 "not parked", which reads as a wrong aggregate ID.
func TestAnActionOnADispatcherThatDoesNotParkAnswers501(t *testing.T) {
	c := newCluster(t, kfake.SeedTopics(1, "wow.example.cart.event"), kfake.AllowAutoTopicCreation())
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
      on-failure: dead-letter
      handler: {type: ok}
  metrics:
    listen: ""
  admin:
    listen: 127.0.0.1:0
`, c.ListenAddrs()[0]))
	for _, a := range []string{"park", "redrive", "skip", "discard"} {
		if code, body := adminAction(t, rt, "projection", "cart-9", a); code != http.StatusNotImplemented {
			t.Errorf("%s on a dispatcher that does not park: %d (%s), want 501", a, code, body)
		}
	}
}
