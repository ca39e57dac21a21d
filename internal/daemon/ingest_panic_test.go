package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
	"github.com/wowd/wowd/internal/ingest"
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
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "wow.example.cart.event"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var reg handler.Registry
	reg.Register(handler.Spec{Name: "count", New: func(any, handler.Deps) (handler.Handler, error) {
		return handler.Sync(func(_ context.Context, m *handler.Message) error {
			if m.Wow.ID == "m0" {
				return handler.Classed(handler.Permanent, errors.New("rejected"))
			}
			return nil
		}), nil
	}})
	cfg, err := config.Parse(fmt.Appendf(nil, `
wow:
  service: carts
  kafka:
    bootstrap-servers: [%s]
    commit-interval: 100ms
    heartbeat-interval: 200ms
  contexts:
    example-service:
      alias: example
      aggregates: [cart]
  dispatchers:
    projection:
      topics: [event]
      handler: {type: count}
  metrics:
    listen: 127.0.0.1:0
  ingest:
    enabled: true
`, c.ListenAddrs()[0]), "test.yaml", &reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := New(cfg, &reg, zaptest.NewLogger(t), "test")
	if err != nil {
		t.Fatal(err)
	}
	p := &panicky{next: rt.ingest.Producer, marker: `"id":"m0"`}
	rt.ingest.Producer = p
	rt.Start()
	defer stopRT(t, rt)
	r := rt.receivers[0]
	testwait.For(t, 20*time.Second, "ready, start barrier lifted", func() bool {
		ok, _ := rt.Ready()
		return ok && !r.Snapshot().IngestHeldAll
	})
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
