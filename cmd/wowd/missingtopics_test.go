package main_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/wowd/wowd/internal/proctest"
)

// TestTopicsThatDoNotExistAreNamed: a receiver none of whose topics
// exists (a typo in a context's alias or in wow.kafka.topic-prefix, the
// first-hour mistake `config validate` cannot see, or a Wow aggregate that
// has written nothing yet) never joins its group, so `wowd run` stays
// unready for as long as that lasts, while docs/operations.md says "A
// replica with no partitions is still ready". Nothing says why: the log
// has "wowd started" and nothing more (the receiver lists its topics at
// start, in ensureDeadLetterTopics, and drops the missing ones silently),
// /readyz answers "1 of 1 receivers have not joined their consumer group
// yet" and `wowd status` "not a member of consumer group …", which sends
// the operator to the group coordinator instead of to the topic name
// (found by review). The readiness reason and a warning now name the
// topics.
func TestTopicsThatDoNotExistAreNamed(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "wow.example.cart.event"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	metricsPort := proctest.FreePort(t)
	// The Wow service writes wow.example.cart.event; the alias has a typo.
	cfg := proctest.WriteConfig(t, fmt.Sprintf(`
wow:
  service: review
  kafka:
    bootstrap-servers: [%s]
  contexts:
    example-service:
      alias: exmple
      aggregates: [cart]
  dispatchers:
    d:
      topics: [event]
      handler: {type: log}
  metrics:
    listen: 127.0.0.1:%d
  shutdown:
    timeout: 5s
`, c.ListenAddrs()[0], metricsPort))
	const missing = "wow.exmple.cart.event"
	_, exited, out := startRun(t, cfg)
	var code int
	var body string
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			t.Fatalf("wowd exited: %v\n%s", err, out.String())
		default:
		}
		if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", metricsPort)); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			code, body = resp.StatusCode, string(b)
		}
		if strings.Contains(body, missing) && strings.Contains(out.String(), missing) {
			if code != http.StatusServiceUnavailable {
				t.Fatalf("/readyz %d %q, want 503 while the receiver cannot join", code, body)
			}
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("15s after start with topic %s missing: /readyz %d %q, and neither it nor the log names the topic; log:\n%s",
		missing, code, strings.TrimSpace(body), out.String())
}
