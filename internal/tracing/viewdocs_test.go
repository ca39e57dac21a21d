package tracing

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/wowd/wowd/handler"
)

// firstBytes accepts one connection on ln and returns its first bytes (up
// to 4), or "" when none came within the wait.
func firstBytes(t *testing.T, ln net.Listener) <-chan []byte {
	t.Helper()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 4)
		n, _ := io.ReadFull(c, b)
		got <- b[:n]
	}()
	return got
}

// docs/operations.md, Tracing, Precedence: "The wow.tracing keys win over
// the standard OTEL_* variables"; Options.Endpoint: "http://host:port
// (plain text) or https://host:port". With OTEL_EXPORTER_OTLP_ENDPOINT
// set to an http:// URL (a sidecar default, a chart's env) and
// wow.tracing.endpoint set to an https:// collector, the key's host wins
// but not its scheme: the exporters take the env's "insecure" and nothing
// in newExporter turns TLS back on, so the spans, and the
// OTEL_EXPORTER_OTLP_HEADERS token with them, go to the https endpoint in
// plain text. A TLS client's first byte is 0x16 (a handshake record).
// Found by review.
func TestAnHTTPSEndpointKeyWinsOverAnHTTPEnvironment(t *testing.T) {
	for _, protocol := range []string{"http/protobuf", "grpc"} {
		t.Run(protocol, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			got := firstBytes(t, ln)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1") // read by the exporters from the process
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
			// The raw listener answers no export: each export gives up
			// within this, so that nothing is left retrying after Shutdown.
			t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "300")
			ratio := 1.0
			p, err := New(context.Background(), Options{
				Endpoint: "https://" + ln.Addr().String(), SamplingRatio: &ratio,
				Getenv: env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": protocol}),
			})
			if err != nil {
				t.Fatal(err)
			}
			_, span := p.Tracer().Start(context.Background(), "process t")
			span.End()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = p.Shutdown(ctx) // the TLS handshake fails against the raw listener: not what is checked
			b := <-got
			if len(b) == 0 {
				t.Fatalf("the exporter never connected to the https endpoint")
			}
			if b[0] != 0x16 {
				t.Fatalf("wow.tracing.endpoint %q with OTEL_EXPORTER_OTLP_ENDPOINT=http://…: the exporter spoke plain text to it (first bytes %q), want a TLS handshake (0x16)",
					"https://"+ln.Addr().String(), b)
			}
		})
	}
}

// The same failure as TestLongKeysDoNotCostTheirBatch, from the other
// texts a span carries of a record: messaging.message.id (the Wow
// message id) and wow.trace_id (the Wow header's trace_id, any text a
// producer wrote) are set whole. Docs: "lost spans, never messages" only
// when the collector is down; here one producer's long id makes the
// collector refuse every span of its batch (the default OTLP/gRPC limit of
// 4 MiB), those of well-formed messages included. Found by review.
func TestLongWowIDsDoNotCostTheirBatch(t *testing.T) {
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
	long := strings.Repeat("t", 17<<10)
	const n = 512
	for i := range n {
		w := &handler.Wow{ID: "msg-1", Header: []handler.WowHeader{{Key: "trace_id", Value: "cmd-1"}}}
		if i%2 == 0 {
			w = &handler.Wow{ID: long + string(rune('a'+i%26)), Header: []handler.WowHeader{{Key: "trace_id", Value: long}}}
		}
		m := &handler.Message{Topic: "wow.example.cart.event", Offset: int64(i), AggregateID: "cart-1", Dispatcher: "d", Wow: w}
		_, span := Start(context.Background(), p.Tracer(), trace.SpanContext{}, time.Now(), m, "g")
		End(span, m, "handled", false, "", "")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	shutdownErr := p.Shutdown(ctx)

	col.mu.Lock()
	defer col.mu.Unlock()
	got := 0
	for _, req := range col.reqs {
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				got += len(ss.Spans)
			}
		}
	}
	if got != n {
		t.Fatalf("collector received %d of %d spans (half the messages had a 17 KiB Wow id and trace_id); shutdown: %v", got, n, shutdownErr)
	}
}
