package cli

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/wowd/wowd/handler"
)

// TestParkedRefusesATopicTheDispatcherDoesNotConsume: --topic picks one of
// the topics an aggregate is parked in; one the dispatcher does not
// consume (a typo, another context's) matched nothing, so list showed an
// empty table, exit 0, as if nothing were parked, and the verbs said the
// aggregate is not parked, exit 1, naming neither the flag nor the topics.
func TestParkedRefusesATopicTheDispatcherDoesNotConsume(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	path := writeConfig(t, fmt.Sprintf(`wow:
  service: s
  kafka:
    bootstrap-servers: [%s]
  contexts:
    shop:
      aggregates: [cart]
  dispatchers:
    a:
      topics: [event]
      on-failure: park
      handler: {type: log}
`, c.ListenAddrs()[0]))
	for _, verb := range []string{"list", "redrive", "discard"} {
		var stdout, stderr bytes.Buffer
		code := run([]string{"parked", verb, "--config", path, "--dispatcher", "a", "--aggregate", "cart-1", "--topic", "wow.shop.cart.evnt"},
			&stdout, &stderr, nil, handler.Default())
		if code != ExitConfig || !strings.Contains(stderr.String(), "--topic") || !strings.Contains(stderr.String(), "wow.shop.cart.event") {
			t.Errorf("%s: exit %d, want %d naming --topic and the dispatcher's topics\n%s%s", verb, code, ExitConfig, stdout.String(), stderr.String())
		}
	}
}
