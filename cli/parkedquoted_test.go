package cli

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/park"
)

// TestParkedTakesAnIDAsWowdStatusShowsIt: wowd status and wowd parked list
// show an aggregate ID that is not plain text (bytes that are not UTF-8,
// control characters, a leading quote or space) quoted with Go escapes,
// "cart-\xff"; --aggregate took that text as it is, an ID of eleven characters
// parked nowhere, so an operator could not name the aggregate shown. It
// takes such a quoted ID as the ID it stands for; a plain one as it is.
func TestParkedTakesAnIDAsWowdStatusShowsIt(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "wow.shop.cart.event", park.StateTopic("s", "a")))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ids := []string{"cart-\xff", `"quoted"`, " lead", "esc\x1b", "plain-7"}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, id := range ids {
		s := &park.State{Service: "s", Dispatcher: "a", Topic: "wow.shop.cart.event", Offset: int64(i), Aggregate: id,
			Head: park.Position{Offset: int64(i)}, Since: time.Now(), Class: "permanent", Reason: "boom", Attempts: 1}
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: park.StateTopic("s", "a"), Key: []byte(s.RecordKey()), Value: s.Marshal()}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
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
	for _, id := range ids {
		shown := termSafe(id) // as wowd status shows it
		var stdout, stderr bytes.Buffer
		code := run([]string{"parked", "list", "--config", path, "--dispatcher", "a", "--aggregate", shown}, &stdout, &stderr, nil, handler.Default())
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		if code != 0 || len(lines) != 2 || !strings.Contains(lines[1], shown) {
			t.Errorf("wowd parked list --aggregate %s: exit %d, want the one aggregate %q listed:\n%s%s", shown, code, id, stdout.String(), stderr.String())
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"parked", "list", "--config", path, "--dispatcher", "a", "--aggregate", `"cart-\q"`}, &stdout, &stderr, nil, handler.Default()); code != ExitConfig || !strings.Contains(stderr.String(), "--aggregate") {
		t.Errorf(`--aggregate "cart-\q" (not a Go-quoted string): exit %d, want %d naming --aggregate:%s%s`, code, ExitConfig, stdout.String(), stderr.String())
	}
}
