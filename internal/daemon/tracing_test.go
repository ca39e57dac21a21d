package daemon

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
	"github.com/wowd/wowd/internal/handlers"
	"github.com/wowd/wowd/internal/wow/wowtest"
)

// The producer's trace context, as a traced producer writes it on a record.
const (
	producerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	producerSpan  = "00f067aa0ba902b7"
	producerTP    = "00-" + producerTrace + "-" + producerSpan + "-01"
)

// traceRun is a daemon on kfake whose dispatcher posts the cart's events
// to an HTTP sink, and the requests the sink received.
type traceRun struct {
	rt       *Daemon
	cl       *kgo.Client
	requests chan http.Header
}

// startTraceRun starts it, with extra configuration under wow (indented
// two spaces).
func startTraceRun(t *testing.T, extra string) *traceRun {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	run := &traceRun{requests: make(chan http.Header, 16)}
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		run.requests <- r.Header.Clone()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(sink.Close)
	var reg handler.Registry
	handlers.Register(&reg)
	cfg, err := config.Parse(fmt.Appendf(nil, `
wow:
  service: projector
  kafka:
    bootstrap-servers: [%s]
    commit-interval: 100ms
  contexts:
    example-service:
      alias: example
      aggregates: [cart]
  dispatchers:
    carts:
      topics: [event]
      handler: {type: http, url: %q}
  metrics:
    listen: ""
%s`, c.ListenAddrs()[0], sink.URL, extra), "test.yaml", &reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTopic("wow.example.cart.event", 1, nil); err != nil {
		t.Fatal(err)
	}
	run.cl, err = kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(run.cl.Close)
	run.rt, err = New(cfg, &reg, zaptest.NewLogger(t), "test")
	if err != nil {
		t.Fatal(err)
	}
	run.rt.Start()
	t.Cleanup(func() { run.stop(t) })
	return run
}

func (run *traceRun) stop(t *testing.T) {
	if run.rt == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := run.rt.Stop(ctx); err != nil {
		t.Error(err)
	}
	run.rt = nil
}

// produce writes a cart event of aggregate id with the record headers kv.
func (run *traceRun) produce(t *testing.T, id string, kv ...string) {
	t.Helper()
	rec := &kgo.Record{Topic: "wow.example.cart.event", Key: []byte(id), Value: wowtest.EventStream("example-service", "cart", id, 1)}
	for i := 0; i < len(kv); i += 2 {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
	}
	if err := run.cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// request returns the next request the sink received.
func (run *traceRun) request(t *testing.T) http.Header {
	t.Helper()
	select {
	case h := <-run.requests:
		return h
	case <-time.After(30 * time.Second):
		t.Fatal("the sink received no request")
		return nil
	}
}

// TestTraceContextReachesTheSink: with tracing off, the HTTP sink forwards
// the record's W3C trace context as it came; an invalid traceparent is not
// forwarded (the record header still is, as Kafka-Header-Traceparent), and
// nothing is made up from Wow's own trace_id.
func TestTraceContextReachesTheSink(t *testing.T) {
	run := startTraceRun(t, "")
	run.produce(t, "cart-1", "traceparent", producerTP, "tracestate", "rojo=00f067aa0ba902b7")
	h := run.request(t)
	if got := h.Get("Traceparent"); got != producerTP {
		t.Errorf("traceparent %q, want the producer's %q", got, producerTP)
	}
	if got := h.Get("Tracestate"); got != "rojo=00f067aa0ba902b7" {
		t.Errorf("tracestate %q", got)
	}

	bad := "00-" + producerTrace + "-0000000000000000-01" // all-zero parent id
	run.produce(t, "cart-2", "traceparent", bad, "tracestate", "rojo=1")
	h = run.request(t)
	if got, ok := h["Traceparent"]; ok {
		t.Errorf("invalid traceparent forwarded as %q", got)
	}
	if _, ok := h["Tracestate"]; ok {
		t.Error("the tracestate of an invalid traceparent was forwarded")
	}
	if got := h.Get("Kafka-Header-Traceparent"); got != bad {
		t.Errorf("Kafka-Header-Traceparent %q, want the record's header %q", got, bad)
	}

	run.produce(t, "cart-3") // a Wow record as Wow writes it: no Kafka headers, a trace_id in its header map
	h = run.request(t)
	if _, ok := h["Traceparent"]; ok {
		t.Errorf("traceparent %q made up for a record without one", h.Get("Traceparent"))
	}
	if h.Get("Wow-Header-Trace_id") == "" {
		t.Error("Wow's trace_id header entry not forwarded")
	}
}
