package daemon

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/ingest"
	"github.com/wowd/wowd/internal/receiver"
	"github.com/wowd/wowd/internal/testwait"
)

// panicky panics at the publish of a message whose value contains its
// marker, and publishes the others through next.
type panicky struct {
	next   ingest.Producer
	marker string
	hit    atomic.Int32
}

func (p *panicky) ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	if bytes.Contains(rs[0].Value, []byte(p.marker)) {
		p.hit.Add(1)
		panic("publishing " + p.marker)
	}
	return p.next.ProduceSync(ctx, rs...)
}

// TestIngestPanicInThePublishLeavesNoHold: m0 fails for good locally, so
// the receiver gives it up and holds its aggregate until it hears where
// the copy went; the publish then panics (net/http recovers it, the caller
// sees the connection end). The receiver must hear that nothing was
// published: otherwise the aggregate's bucket stays on the Kafka path
// until a restart, waiting for a copy nobody will report.
func TestIngestPanicInThePublishLeavesNoHold(t *testing.T) {
	c := newCluster(t, kfake.SeedTopics(1, "wow.example.cart.event"))
	var reg handler.Registry
	reg.Register(handler.Spec{Name: "count", New: func(any, handler.Deps) (handler.Handler, error) {
		return handler.Sync(func(_ context.Context, m *handler.Message) error {
			if m.Wow.ID == "m0" {
				return handler.Classed(handler.Permanent, errors.New("rejected"))
			}
			return nil
		}), nil
	}})
	rt := newInstance(t, c, &reg, "")
	p := &panicky{next: rt.ingest.Producer, marker: `"id":"m0"`}
	rt.ingest.Producer = p
	rt.Start(context.Background())
	defer stopRT(t, rt)
	r := rt.receivers[0]
	waitIngestReady(t, rt)
	resp, err := http.Post("http://"+rt.MetricsAddr()+"/v1/messages/event", "application/json", bytes.NewReader(event("m0", "cart-1", "")))
	if err == nil {
		resp.Body.Close()
		t.Fatalf("m0 answered %d; want the connection to end with the panic", resp.StatusCode)
	}
	if n := p.hit.Load(); n != 1 {
		t.Fatalf("the publish of m0 reached %d times, want 1 (%v)", n, err)
	}
	testwait.For(t, 5*time.Second, "no aggregate held once the publish ended", func() bool { return r.Snapshot().IngestHeld == 0 })
}

// refusing is a receiver of the ingest that refuses every message, and
// panics once it was told of the refusal (a panic between the refusals
// and the publish).
type refusing struct{ ingest.Receiver }

func (r refusing) Admit(context.Context, *kgo.Record) (receiver.Admitted, error) {
	return receiver.Admitted{}, errors.New("refused by the test")
}

func (r refusing) Refused(topic, key string) {
	r.Receiver.Refused(topic, key)
	panic("after the refusal of " + key)
}

// TestIngestPanicAfterARefusalLeavesNoHold: of two dispatchers,
// "projection" takes the message and "refused" refuses it; refused holds
// the aggregate from the refusal, until it hears where the copy went. A
// panic right after the refusal (net/http recovers it) must still tell it
// that nothing was published: otherwise its aggregate stays on the Kafka
// path until a restart.
func TestIngestPanicAfterARefusalLeavesNoHold(t *testing.T) {
	c := newCluster(t, kfake.SeedTopics(1, "wow.example.cart.event"))
	var reg handler.Registry
	reg.Register(handler.Spec{Name: "count", New: func(any, handler.Deps) (handler.Handler, error) {
		return handler.Sync(func(context.Context, *handler.Message) error { return nil }), nil
	}})
	// Dispatchers projection (takes it) and refused (refuses it), in
	// the ingest's order.
	rt := newInstance(t, c, &reg, "    refused:\n      topics: [event]\n      handler: {type: count}\n")
	var b *receiver.Receiver
	for i, r := range rt.ingest.Receivers {
		if r.Dispatcher() == "refused" {
			rt.ingest.Receivers[i] = refusing{r}
		}
	}
	for _, r := range rt.receivers {
		if r.Dispatcher() == "refused" {
			b = r
		}
	}
	if b == nil || len(rt.ingest.Receivers) != 2 || rt.ingest.Receivers[0].Dispatcher() != "projection" {
		t.Fatalf("want the ingest's receivers projection, then refused (refusing); have %d", len(rt.ingest.Receivers))
	}
	rt.Start(context.Background())
	defer stopRT(t, rt)
	waitIngestReady(t, rt)
	resp, err := http.Post("http://"+rt.MetricsAddr()+"/v1/messages/event", "application/json", bytes.NewReader(event("m0", "cart-1", "")))
	if err == nil {
		resp.Body.Close()
		t.Fatalf("m0 answered %d; want the connection to end with the panic", resp.StatusCode)
	}
	testwait.For(t, 5*time.Second, "refused holds no aggregate once the request ended", func() bool { return b.Snapshot().IngestHeld == 0 })
}
