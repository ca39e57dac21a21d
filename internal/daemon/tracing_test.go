package daemon

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
	"github.com/wowd/wowd/internal/handlers"
	"github.com/wowd/wowd/internal/testwait"
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
	// respond answers a request to the sink; nil: 204.
	respond func(h http.Header) int
}

// startTraceRun starts it, with extra configuration under wow (indented
// two spaces).
func startTraceRun(t *testing.T, extra string, respond func(http.Header) int) *traceRun {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	run := &traceRun{requests: make(chan http.Header, 16), respond: respond}
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		run.requests <- r.Header.Clone()
		status := http.StatusNoContent
		if run.respond != nil {
			status = run.respond(r.Header)
		}
		w.WriteHeader(status)
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
      handler: {type: http, url: %q, backoff-initial: 1ms, backoff-max: 5ms, max-attempts: 3}
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
	run.rt.Start(context.Background())
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

// outcomes returns how many messages had outcome o.
func (run *traceRun) outcomes(t *testing.T, o string) float64 {
	t.Helper()
	mfs, err := run.rt.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "wowd_messages_total" {
			continue
		}
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == "outcome" && l.GetValue() == o {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
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
	run := startTraceRun(t, "", nil)
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

// collector is an OTLP/HTTP trace receiver: it decodes each export request
// (protobuf, as the exporter sends by default) and keeps its spans with
// their resource.
type collector struct {
	srv *httptest.Server
	mu  sync.Mutex // guards spans and bad
	got []exportedSpan
	bad []string // requests that were not OTLP trace exports
}

type exportedSpan struct {
	resource map[string]string
	span     *tracepb.Span
}

func newCollector(t *testing.T) *collector {
	c := &collector{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil && r.Header.Get("Content-Encoding") == "gzip" {
			var zr *gzip.Reader
			if zr, err = gzip.NewReader(bytes.NewReader(body)); err == nil {
				body, err = io.ReadAll(zr)
			}
		}
		if err == nil {
			err = proto.Unmarshal(body, &req)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if err != nil || r.URL.Path != "/otlp/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			c.bad = append(c.bad, fmt.Sprintf("%s %s (%s): %v", r.Method, r.URL.Path, r.Header.Get("Content-Type"), err))
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		for _, rs := range req.ResourceSpans {
			res := map[string]string{}
			for _, kv := range rs.GetResource().GetAttributes() {
				res[kv.Key] = kv.GetValue().GetStringValue()
			}
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					c.got = append(c.got, exportedSpan{resource: res, span: sp})
				}
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// span returns the exported span of the message whose Kafka key is key.
func (c *collector) span(t *testing.T, key string) exportedSpan {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.bad) > 0 {
		t.Fatalf("bad export requests: %v", c.bad)
	}
	for _, s := range c.got {
		if attrs(s.span.Attributes)["messaging.kafka.message.key"] == key {
			return s
		}
	}
	t.Fatalf("no span of message %s among %d exported", key, len(c.got))
	return exportedSpan{}
}

// attrs flattens OTLP attributes to text.
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = strconv.FormatInt(v.IntValue, 10)
		case *commonpb.AnyValue_DoubleValue:
			m[kv.Key] = strconv.FormatFloat(v.DoubleValue, 'g', -1, 64)
		case *commonpb.AnyValue_BoolValue:
			m[kv.Key] = strconv.FormatBool(v.BoolValue)
		}
	}
	return m
}

// TestSpansReachTheCollector: with wow.tracing enabled, each message gets
// a consumer span, exported over OTLP/HTTP at the latest when wowd stops,
// that is a child of the producer's traceparent and carries the messaging
// attributes; the HTTP sink receives a traceparent of the same trace whose
// parent is that span. A retry the sink made is an event on the span; a
// message that failed for good (parked, with format wow) ends its span with
// an error and its class.
func TestSpansReachTheCollector(t *testing.T) {
	col := newCollector(t)
	var tries sync.Map // aggregate id (ce-subject) → *atomic.Int32
	run := startTraceRun(t, fmt.Sprintf(`  tracing:
    enabled: true
    exporter: otlp-http
    endpoint: %s/otlp
    resource-attributes: [deployment.environment.name=test]
`, col.srv.URL), func(h http.Header) int {
		n, _ := tries.LoadOrStore(h.Get("Ce-Subject"), new(atomic.Int32))
		switch try := n.(*atomic.Int32).Add(1); {
		case h.Get("Ce-Subject") == "cart-bad":
			return http.StatusBadRequest // permanent: parked
		case try == 1:
			return http.StatusServiceUnavailable // retried by the sink
		}
		return http.StatusNoContent
	})
	run.produce(t, "cart-1", "traceparent", producerTP)
	first, second := run.request(t), run.request(t)
	run.produce(t, "cart-bad", "traceparent", producerTP)
	run.request(t)
	run.produce(t, "cart-plain")
	run.request(t)
	run.request(t)
	testwait.For(t, 30*time.Second, "cart-bad parked", func() bool { return run.outcomes(t, "parked") >= 1 })
	run.stop(t) // flushes the spans

	s := col.span(t, "cart-1")
	sp := s.span
	if got := hex.EncodeToString(sp.TraceId); got != producerTrace {
		t.Errorf("trace id %s, want the producer's %s", got, producerTrace)
	}
	if got := hex.EncodeToString(sp.ParentSpanId); got != producerSpan {
		t.Errorf("parent span id %s, want the producer's %s", got, producerSpan)
	}
	if sp.Kind != tracepb.Span_SPAN_KIND_CONSUMER || sp.Name != "process wow.example.cart.event" {
		t.Errorf("span %q of kind %v", sp.Name, sp.Kind)
	}
	for k, v := range map[string]string{
		"messaging.system":                   "kafka",
		"messaging.operation.type":           "process",
		"messaging.destination.name":         "wow.example.cart.event",
		"messaging.destination.partition.id": "0",
		"messaging.kafka.offset":             "0",
		"messaging.consumer.group.name":      "projector.carts.example",
		"messaging.kafka.message.key":        "cart-1",
		"wowd.dispatcher":                    "carts",
		"wowd.outcome":                       "handled",
		"wow.trace_id":                       "0U7K3b1c1",
	} {
		if got := attrs(sp.Attributes)[k]; got != v {
			t.Errorf("attribute %s = %q, want %q", k, got, v)
		}
	}
	if s.resource["service.name"] != "projector" || s.resource["deployment.environment.name"] != "test" {
		t.Errorf("resource %v", s.resource)
	}
	if len(sp.Events) != 1 || sp.Events[0].Name != "retry" || attrs(sp.Events[0].Attributes)["wowd.attempt"] != "1" {
		t.Errorf("events %v, want one retry of attempt 1", sp.Events)
	}
	if sp.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("status %v", sp.Status)
	}
	// Both attempts sent the span as the parent, in the producer's trace.
	for i, h := range []http.Header{first, second} {
		want := "00-" + producerTrace + "-" + hex.EncodeToString(sp.SpanId) + "-01"
		if got := h.Get("Traceparent"); got != want {
			t.Errorf("attempt %d: traceparent %q, want %q", i+1, got, want)
		}
	}

	bad := col.span(t, "cart-bad").span
	if bad.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || attrs(bad.Attributes)["error.type"] != "permanent" ||
		attrs(bad.Attributes)["wowd.outcome"] != "parked" {
		t.Errorf("message that failed for good: status %v, attributes %v", bad.Status, attrs(bad.Attributes))
	}

	// Without a traceparent the span starts a trace of its own.
	plain := col.span(t, "cart-plain").span
	if len(plain.ParentSpanId) != 0 || hex.EncodeToString(plain.TraceId) == producerTrace {
		t.Errorf("span of a record without traceparent: trace %x, parent %x", plain.TraceId, plain.ParentSpanId)
	}
}
