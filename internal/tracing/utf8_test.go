package tracing

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/wowd/wowd/handler"
)

// TestInvalidUTF8Reason: a failure text that is not valid UTF-8, or is cut
// inside a character, reaches the collector repaired, with every other
// span of its batch; the exporter refused to encode the batch before.
func TestInvalidUTF8Reason(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	col := &grpcCollector{}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, col)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	ratio := 1.0
	p, err := New(context.Background(), Options{
		Endpoint: "http://" + ln.Addr().String(), SamplingRatio: &ratio, Service: "projector",
		Getenv: env(map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}),
	})
	if err != nil {
		t.Fatal(err)
	}
	// Ten healthy messages, handled.
	for i := range 10 {
		m := &handler.Message{Topic: "wow.example.cart.event", Offset: int64(i), AggregateID: "cart-1", Dispatcher: "d"}
		_, span := Start(context.Background(), p.Tracer(), trace.SpanContext{}, time.Now(), m, "g")
		End(span, m, "handled", false, "", "")
	}
	// One dead-lettered with a valid UTF-8 reason whose 256th byte is in
	// the middle of a rune ("é" is 2 bytes): 255 ASCII bytes, then "é…".
	m := &handler.Message{Topic: "wow.example.cart.event", Offset: 10, AggregateID: "cart-2", Dispatcher: "d"}
	_, span := Start(context.Background(), p.Tracer(), trace.SpanContext{}, time.Now(), m, "g")
	reason := strings.Repeat("x", 255) + "é: la requête a échoué"
	End(span, m, "dead_lettered", true, "permanent", reason)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	shutdownErr := p.Shutdown(ctx)

	col.mu.Lock()
	defer col.mu.Unlock()
	n := 0
	for _, req := range col.reqs {
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				n += len(ss.Spans)
			}
		}
	}
	if n != 11 {
		t.Fatalf("collector received %d spans, want 11 (shutdown error: %v)", n, shutdownErr)
	}
}

// The same over OTLP/HTTP (the default exporter): the request is never sent.
func TestInvalidUTF8ReasonHTTP(t *testing.T) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	ratio := 1.0
	p, err := New(context.Background(), Options{Endpoint: srv.URL, SamplingRatio: &ratio, Getenv: env(nil)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		m := &handler.Message{Topic: "wow.example.cart.event", Offset: int64(i), AggregateID: "cart-1", Dispatcher: "d"}
		_, span := Start(context.Background(), p.Tracer(), trace.SpanContext{}, time.Now(), m, "g")
		End(span, m, "handled", false, "", "")
	}
	m := &handler.Message{Topic: "wow.example.cart.event", Offset: 10, AggregateID: "cart-2", Dispatcher: "d"}
	_, span := Start(context.Background(), p.Tracer(), trace.SpanContext{}, time.Now(), m, "g")
	End(span, m, "dead_lettered", true, "permanent", strings.Repeat("x", 255)+"é: la requête a échoué")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = p.Shutdown(ctx)
	if posts.Load() == 0 {
		t.Fatal("no export request reached the collector: the batch of 11 spans was dropped")
	}
}
