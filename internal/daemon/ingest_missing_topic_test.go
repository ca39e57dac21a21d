package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/testwait"
)

// TestIngestToATopicNotThereYetHandlesNothing: the ingest's topic does not
// exist yet. A message to it is answered 503 with Retry-After and is
// neither handled nor published (before: admitted and handled, then its
// publish failed, 502, and every retry was handled again). Once the topic
// exists, with a max.message.bytes of 2,000,000, a 1.5 MB message is
// accepted: the client's batch limit for the topic is the topic's own,
// not the default it would have learned from a publish made before the
// limit was read (found by review: 502, MESSAGE_TOO_LARGE from the client).
func TestIngestToATopicNotThereYetHandlesNothing(t *testing.T) {
	const topic = "wow.example.cart.event"
	c := newCluster(t)
	cnt := &counter{n: map[string]int{}}
	var reg handler.Registry
	reg.Register(cnt.spec())
	rt := startUnready(t, c, &reg, "") // not ready while its topic is missing
	defer stopRT(t, rt)

	resp := postAuth(t, rt.MetricsAddr(), "", event("early", "cart-1", ""))
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a message to a missing topic answered %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if n := cnt.get("early"); n != 0 {
		t.Fatalf("a message to a missing topic was handled %d times", n)
	}

	if err := c.CreateTopic(topic, 2, map[string]string{"max.message.bytes": "2000000"}); err != nil {
		t.Fatal(err)
	}
	code := post(t, rt.MetricsAddr(), event("large", "cart-2", `"pad":"`+strings.Repeat("x", 1_500_000)+`"`))
	if code != 202 {
		t.Fatalf("a 1.5 MB message to a topic that takes 2,000,000 bytes answered %d, want 202", code)
	}
	testwait.For(t, 10*time.Second, "the large message handled", func() bool { return cnt.get("large") == 1 })
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if n := endOffsets(t, kadm.NewClient(cl), topic); n != 1 {
		t.Fatalf("%s holds %d records, want the large message's copy alone", topic, n)
	}
}
