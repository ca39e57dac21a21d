package tracing

import (
	"context"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/wowd/wowd/handler"
)

const (
	validTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	spanID  = "00f067aa0ba902b7"
)

func TestParseTraceparent(t *testing.T) {
	for _, tc := range []struct {
		name, v string
		ok      bool
		flags   byte
	}{
		{"valid, sampled", validTP, true, 1},
		{"valid, not sampled", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true, 0},
		{"later version with more fields", "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-holds", true, 1},
		{"later version, no more fields", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03", true, 3},
		{"unknown flags are cleared", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff", true, 3},
		{"unknown flags of a later version are cleared", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-05", true, 1},
		{"version 00 with more fields", validTP + "-00", false, 0},
		{"later version, junk after flags", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", false, 0},
		{"version ff", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false, 0},
		{"upper-case hex", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false, 0},
		{"upper-case flags", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0A", false, 0},
		{"zero trace id", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", false, 0},
		{"zero span id", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false, 0},
		{"not hex", "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", false, 0},
		{"short trace id", "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", false, 0},
		{"wrong separator", "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false, 0},
		{"empty", "", false, 0},
		{"a Wow trace_id", "0U7K2nR80001001", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tid, sid, flags, ok := ParseTraceparent([]byte(tc.v))
			if ok != tc.ok {
				t.Fatalf("ParseTraceparent(%q) ok = %v, want %v", tc.v, ok, tc.ok)
			}
			if !ok {
				return
			}
			if tid.String() != traceID || sid.String() != spanID || flags != tc.flags {
				t.Errorf("got %s %s %02x, want %s %s %02x", tid, sid, flags, traceID, spanID, tc.flags)
			}
		})
	}
}

func TestFromHeaders(t *testing.T) {
	hs := func(kv ...string) []handler.Header {
		var out []handler.Header
		for i := 0; i < len(kv); i += 2 {
			out = append(out, handler.Header{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return out
	}
	t.Run("traceparent and tracestate", func(t *testing.T) {
		sc, ok := FromHeaders(hs("content-type", "x", "traceparent", validTP, "tracestate", "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"))
		if !ok {
			t.Fatal("no span context")
		}
		if sc.TraceID().String() != traceID || sc.SpanID().String() != spanID || !sc.IsSampled() || !sc.IsRemote() {
			t.Errorf("span context %v, want %s/%s sampled and remote", sc, traceID, spanID)
		}
		if got := sc.TraceState().String(); got != "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7" {
			t.Errorf("tracestate %q", got)
		}
	})
	t.Run("header names are compared without case", func(t *testing.T) {
		if _, ok := FromHeaders(hs("Traceparent", validTP)); !ok {
			t.Error("Traceparent not read")
		}
	})
	t.Run("repeated tracestate headers are joined", func(t *testing.T) {
		sc, _ := FromHeaders(hs("tracestate", "a=1", "traceparent", validTP, "tracestate", "b=2"))
		if got := sc.TraceState().String(); got != "a=1,b=2" {
			t.Errorf("tracestate %q, want a=1,b=2", got)
		}
	})
	t.Run("empty and blank tracestate members are passed over", func(t *testing.T) {
		for _, tc := range []struct {
			h    []handler.Header
			want string
		}{
			{hs("tracestate", "a=1", "traceparent", validTP, "tracestate", " "), "a=1"},
			{hs("traceparent", validTP, "tracestate", "a=1, ,\t, b=2 ,"), "a=1,b=2"},
			{hs("traceparent", validTP, "tracestate", "", "tracestate", "a=1,b=2"), "a=1,b=2"},
		} {
			sc, ok := FromHeaders(tc.h)
			if got := sc.TraceState().String(); !ok || got != tc.want {
				t.Errorf("%v: ok %v, tracestate %q, want %q", tc.h, ok, got, tc.want)
			}
		}
	})
	t.Run("an invalid tracestate is dropped, the traceparent kept", func(t *testing.T) {
		sc, ok := FromHeaders(hs("traceparent", validTP, "tracestate", "not a list member"))
		if !ok || sc.TraceState().Len() != 0 {
			t.Errorf("ok %v, tracestate %q", ok, sc.TraceState())
		}
	})
	for name, h := range map[string][]handler.Header{
		"none":                 nil,
		"only tracestate":      hs("tracestate", "a=1"),
		"invalid traceparent":  hs("traceparent", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "tracestate", "a=1"),
		"two traceparents":     hs("traceparent", validTP, "traceparent", validTP),
		"Wow's trace_id":       hs("trace_id", "0U7K2nR80001001"),
		"traceparent is empty": hs("traceparent", ""),
	} {
		t.Run(name, func(t *testing.T) {
			if sc, ok := FromHeaders(h); ok || sc.IsValid() {
				t.Errorf("got span context %v", sc)
			}
		})
	}
}

func TestInject(t *testing.T) {
	in := hsOf(t, validTP, "rojo=00f067aa0ba902b7")
	h := http.Header{"Tracestate": {"stale=1"}}
	Inject(Context(context.Background(), in), h)
	if got := h.Get("traceparent"); got != validTP {
		t.Errorf("traceparent %q, want %q", got, validTP)
	}
	if got := h.Get("tracestate"); got != "rojo=00f067aa0ba902b7" {
		t.Errorf("tracestate %q", got)
	}

	// A later version is forwarded as version 00.
	sc, _ := FromHeaders([]handler.Header{{Key: "traceparent", Value: []byte("cc-" + traceID + "-" + spanID + "-01-more")}})
	h = http.Header{"Tracestate": {"stale=1"}}
	Inject(Context(context.Background(), sc), h)
	if got := h.Get("traceparent"); got != validTP {
		t.Errorf("traceparent %q, want %q", got, validTP)
	}
	if _, ok := h["Tracestate"]; ok {
		t.Error("a tracestate the message does not carry was left in place")
	}

	// Unknown flags are not sent on: a sink's OpenTelemetry propagator
	// refuses a version 00 value that has them.
	for _, in := range []string{"00-" + traceID + "-" + spanID + "-ff", "01-" + traceID + "-" + spanID + "-05"} {
		sc, _ := FromHeaders([]handler.Header{{Key: "traceparent", Value: []byte(in)}})
		h = http.Header{}
		Inject(Context(context.Background(), sc), h)
		got := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(h)))
		if !got.IsValid() || !got.IsSampled() || got.TraceID().String() != traceID {
			t.Errorf("%s sent on as %q: a sink's propagator reads %v", in, h.Get("traceparent"), got)
		}
	}

	h = http.Header{}
	Inject(context.Background(), h)
	if len(h) != 0 {
		t.Errorf("headers set without a span context: %v", h)
	}
}

func hsOf(t *testing.T, tp, ts string) trace.SpanContext {
	t.Helper()
	sc, ok := FromHeaders([]handler.Header{{Key: "traceparent", Value: []byte(tp)}, {Key: "tracestate", Value: []byte(ts)}})
	if !ok {
		t.Fatalf("%q does not parse", tp)
	}
	return sc
}

func TestInjectWithoutSpanContextAllocatesNothing(t *testing.T) {
	h := http.Header{}
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() { Inject(ctx, h) }); n != 0 {
		t.Errorf("Inject without a span context: %v allocations, want 0", n)
	}
	hs := []handler.Header{{Key: "content-type", Value: []byte("application/json")}}
	if n := testing.AllocsPerRun(100, func() { FromHeaders(hs) }); n != 0 {
		t.Errorf("FromHeaders without traceparent: %v allocations, want 0", n)
	}
}
