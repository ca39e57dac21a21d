package daemon

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/wowd/wowd/internal/park"
	"github.com/wowd/wowd/internal/testwait"
)

// /readyz and wowd_receiver_ready tell the same story, and /readyz says
// why. A receiver that parks is ready only once it has read its state
// topic; the gauge reported membership alone, so with the state topic
// unreadable (made by hand with two partitions, which wowd refuses to
// read) /readyz answered 503 "have not joined their consumer group" of a
// receiver that had joined, while wowd_receiver_ready read 1 and the
// alert on it (WowdReceiverNotJoined) stayed quiet. Found by review.
func TestReadyzAgreesWithTheReadyGauge(t *testing.T) {
	c := newCluster(t, kfake.SeedTopics(1, "wow.example.cart.event"), kfake.SeedTopics(2, park.StateTopic("carts", "projection")))
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
`, c.ListenAddrs()[0]))
	testwait.For(t, 30*time.Second, "the receiver joined its group", func() bool { return rt.receivers[0].Joined() })
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + rt.MetricsAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	code, why := get("/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(why, "have not read their parked aggregates' state topic") {
		t.Errorf("/readyz answers %d %q, want 503 naming the state topic not read", code, strings.TrimSpace(why))
	}
	_, metrics := get("/metrics")
	sc := bufio.NewScanner(strings.NewReader(metrics))
	found := false
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "wowd_receiver_ready{") {
			found = true
			if !strings.HasSuffix(line, " 0") {
				t.Errorf("%s while /readyz answers %d", line, code)
			}
		}
	}
	if !found {
		t.Error("no wowd_receiver_ready series")
	}
}
