package tracing

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func env(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

// grpcCollector is an OTLP/gRPC trace receiver on 127.0.0.1.
type grpcCollector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu   sync.Mutex // guards reqs
	reqs []*coltracepb.ExportTraceServiceRequest
}

func (c *grpcCollector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	c.reqs = append(c.reqs, req)
	c.mu.Unlock()
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// TestExportOverGRPC: with OTEL_EXPORTER_OTLP_PROTOCOL=grpc and no
// exporter key, spans go to the endpoint over OTLP/gRPC, with the
// configured resource, and Shutdown flushes them.
func TestExportOverGRPC(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	col := &grpcCollector{}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, col)
	go func() { _ = srv.Serve(ln) }() // stopped below
	defer srv.Stop()

	ratio := 1.0
	p, err := New(context.Background(), Options{
		Endpoint: "http://" + ln.Addr().String(), SamplingRatio: &ratio,
		ResourceAttributes: []string{"team=carts"}, Service: "projector", Version: "1.2.3",
		Getenv: env(map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}),
	})
	if err != nil {
		t.Fatal(err)
	}
	_, span := p.Tracer().Start(context.Background(), "process t")
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	if len(col.reqs) != 1 || len(col.reqs[0].ResourceSpans) != 1 {
		t.Fatalf("export requests %v, want one", col.reqs)
	}
	rs := col.reqs[0].ResourceSpans[0]
	res := map[string]string{}
	for _, kv := range rs.Resource.Attributes {
		res[kv.Key] = kv.Value.GetStringValue()
	}
	if res["service.name"] != "projector" || res["service.version"] != "1.2.3" || res["team"] != "carts" {
		t.Errorf("resource %v", res)
	}
	if n := len(rs.ScopeSpans); n != 1 || rs.ScopeSpans[0].Spans[0].Name != "process t" {
		t.Errorf("spans %v", rs.ScopeSpans)
	}
}

// TestResourcePrecedence: wow.tracing.resource-attributes win over
// OTEL_SERVICE_NAME, which wins over OTEL_RESOURCE_ATTRIBUTES, which win
// over wow.service.
func TestResourcePrecedence(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		own  []string
		want map[string]string
	}{
		{"defaults", nil, nil, map[string]string{"service.name": "projector"}},
		{"OTEL_RESOURCE_ATTRIBUTES", map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "service.name=env,a=x%20y"}, nil,
			map[string]string{"service.name": "env", "a": "x y"}},
		{"OTEL_SERVICE_NAME", map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "service.name=env,a=1", "OTEL_SERVICE_NAME": "named"}, nil,
			map[string]string{"service.name": "named", "a": "1"}},
		{"the keys", map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "a=1,b=2", "OTEL_SERVICE_NAME": "named"}, []string{"b=3", "service.name=own"},
			map[string]string{"service.name": "own", "a": "1", "b": "3"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, err := newResource(context.Background(), Options{Service: "projector", ResourceAttributes: c.own, Getenv: env(c.env)})
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range c.want {
				if got, _ := res.Set().Value(attribute.Key(k)); got.AsString() != v {
					t.Errorf("%s = %q, want %q (resource %v)", k, got.AsString(), v, res)
				}
			}
		})
	}
	_, err := newResource(context.Background(), Options{Getenv: env(map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "novalue"})})
	if err == nil {
		t.Error("a malformed OTEL_RESOURCE_ATTRIBUTES was accepted")
	}
}

func TestDisabled(t *testing.T) {
	for v, want := range map[string]bool{"": false, "true": true, "TRUE": true, "false": false, "1": false} {
		if got := Disabled(env(map[string]string{"OTEL_SDK_DISABLED": v})); got != want {
			t.Errorf("OTEL_SDK_DISABLED=%q: disabled %v, want %v", v, got, want)
		}
	}
}

func TestUnknownExporter(t *testing.T) {
	if _, err := New(context.Background(), Options{Exporter: "zipkin", Getenv: env(nil)}); err == nil {
		t.Error("exporter zipkin accepted")
	}
}
