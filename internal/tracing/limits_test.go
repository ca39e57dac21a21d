package tracing

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/wowd/wowd/handler"
)

// A sampling ratio of NaN is refused: it parsed as a float neither below 0
// nor above 1, and the SDK's TraceIDRatioBased(NaN) takes uint64(NaN·2^63)
// as its bound, which on amd64 samples every trace. Found by review.
func TestSamplingRatioNaNIsRefused(t *testing.T) {
	for _, s := range []string{"NaN", "nan"} {
		if r, err := ParseSamplingRatio(s); err == nil {
			t.Errorf("ParseSamplingRatio(%q) = %v, nil: want an error (not a number from 0 to 1)", s, r)
		}
	}
}

// Long record keys do not cost a batch of spans: the key went on every
// span as messaging.kafka.message.key whole (the SDK sets no length limit
// by default), so keys of 17 KB on half the messages made a batch of 512
// spans larger than an OTLP/gRPC receiver's default 4 MiB, and the
// collector refused all of it, the spans with short keys included. The
// same kind of failure as TestInvalidUTF8Reason, from the key. Found by
// review.
func TestLongKeysDoNotCostTheirBatch(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	col := &grpcCollector{}
	srv := grpc.NewServer() // the default 4 MiB receive limit, as an OpenTelemetry Collector's
	coltracepb.RegisterTraceServiceServer(srv, col)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	ratio := 1.0
	p, err := New(context.Background(), Options{
		Endpoint: "http://" + ln.Addr().String(), SamplingRatio: &ratio,
		Getenv: env(map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}),
	})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("k", 17<<10)
	const n = 512
	for i := range n {
		id := "cart-1"
		if i%2 == 0 {
			id = long + string(rune('a'+i%26)) // every other message has a long key
		}
		m := &handler.Message{Topic: "wow.example.cart.event", Offset: int64(i), AggregateID: id, Dispatcher: "d"}
		_, span := Start(context.Background(), p.Tracer(), trace.SpanContext{}, time.Now(), m, "g")
		End(span, m, "handled", false, "", "")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	shutdownErr := p.Shutdown(ctx)

	col.mu.Lock()
	defer col.mu.Unlock()
	got, longest := 0, 0
	for _, req := range col.reqs {
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				got += len(ss.Spans)
				for _, sp := range ss.Spans {
					for _, a := range sp.Attributes {
						if a.Key == "messaging.kafka.message.key" {
							longest = max(longest, len(a.Value.GetStringValue()))
						}
					}
				}
			}
		}
	}
	if got != n || longest > maxKeyText+len("…") {
		t.Fatalf("collector received %d of %d spans, the longest key attribute %d bytes; shutdown: %v", got, n, longest, shutdownErr)
	}
}
