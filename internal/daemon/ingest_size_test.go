package daemon

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/testwait"
)

// TestIngestMessageSizedByItsTopic: the event topic takes records of up to
// 2,000,000 bytes. An ingested message of 1.5 MB, which the Kafka client's
// default batch limit (1,000,012 bytes) would refuse after it was handled
// locally, is handled once and published whole; one of 2.5 MB, which the
// topic would refuse, is answered 413 before it is handled anywhere, and
// never published.
func TestIngestMessageSizedByItsTopic(t *testing.T) {
	const topic = "wow.example.cart.event"
	c := newCluster(t)
	if err := c.CreateTopic(topic, 2, map[string]string{"max.message.bytes": "2000000"}); err != nil {
		t.Fatal(err)
	}
	cnt := &counter{n: map[string]int{}}
	var reg handler.Registry
	reg.Register(cnt.spec())
	rt := startInstance(t, c, &reg)
	defer stopRT(t, rt)

	pad := func(n int) string { return `"pad":"` + strings.Repeat("x", n) + `"` }
	if code := post(t, rt.MetricsAddr(), event("large", "cart-1", pad(1_500_000))); code != http.StatusAccepted {
		t.Fatalf("a 1.5 MB message for a topic of 2 MB: answered %d, want 202", code)
	}
	if code := post(t, rt.MetricsAddr(), event("too-large", "cart-2", pad(2_500_000))); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a 2.5 MB message for a topic of 2 MB: answered %d, want 413", code)
	}
	if code := post(t, rt.MetricsAddr(), event("small", "cart-3", pad(10))); code != http.StatusAccepted {
		t.Fatalf("a small message: answered %d, want 202", code)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var published []*kgo.Record
	testwait.For(t, 20*time.Second, "the two accepted messages in the topic", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		published = append(published, cl.PollFetches(ctx).Records()...)
		return len(published) >= 2
	})
	for _, r := range published {
		if len(r.Value) > 2_000_000 || strings.Contains(string(r.Value), `"too-large"`) {
			t.Errorf("published a record of %d bytes, key %s: the refused message", len(r.Value), r.Key)
		}
	}
	if len(published) != 2 || len(published[0].Value)+len(published[1].Value) < 1_500_000 {
		t.Errorf("published %d records; want the large one, whole, and the small one", len(published))
	}
	if cnt.get("large") != 1 || cnt.get("small") != 1 || cnt.get("too-large") != 0 {
		t.Errorf("handled large %d, small %d, too-large %d times; want 1, 1, 0", cnt.get("large"), cnt.get("small"), cnt.get("too-large"))
	}
}
