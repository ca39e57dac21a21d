package receiver

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/executor"
	"github.com/wowd/wowd/internal/metrics"
	"github.com/wowd/wowd/internal/wow/wowtest"
)

// messagePath is a receiver cut down to what one record's way through it
// touches once polled: admitted into its partition's tracker, run by its
// mailbox's turn (executor.Resume zero: no mailbox to move on), screened,
// tried by a synchronous handler that reads the span context of its
// context (as an OpenTelemetry-instrumented plugin does), acknowledged and
// finished. It is the per-message path the tracing hooks sit in.
type messagePath struct {
	r   *Receiver
	p   *partition
	rec *kgo.Record
	sc  trace.SpanContext // what the handler saw last
}

func newMessagePath(tb testing.TB, tracer trace.Tracer, headers []kgo.RecordHeader) *messagePath {
	mp := &messagePath{}
	hd := handler.Sync(func(ctx context.Context, _ *handler.Message) error {
		mp.sc = trace.SpanContextFromContext(ctx)
		return nil
	})
	mp.r = &Receiver{
		o: Options{Dispatcher: "d", Service: "svc", GroupID: "g", MaxInFlight: 1 << 30, Handler: hd,
			Logger: zap.NewNop(), Tracer: tracer},
		log: zap.NewNop(), window: 1 << 30, batch: 1, spanCap: 1 << 30, room: make(chan struct{}, 1),
		parts: map[tp]*partition{},
	}
	mp.r.m = metrics.New("bench").Receiver("d", "shop", "bench", mp.r)
	mp.p = newPartition(testTopic, 0)
	tb.Cleanup(mp.p.cancel)
	mp.r.parts[tp{testTopic, 0}] = mp.p
	mp.rec = &kgo.Record{Topic: testTopic, Key: []byte("agg-1"), Value: wowtest.EventStream("shop", "cart", "agg-1", 1), Headers: headers}
	return mp
}

// one takes a record through the path.
func (mp *messagePath) one(offset int64) {
	r, p := mp.r, mp.p
	mp.rec.Offset = offset
	p.pending.Add(1)
	r.inFlight.Add(1)
	j := newJob(r, p, mp.rec, p.tr.nextSeq())
	p.mu.Lock()
	p.tr.push(offset, 0, j)
	p.mu.Unlock()
	j.Run(executor.Resume{}) // finished by the handler's Ack: popped from the tracker, pooled
}

var traceparentHeader = []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}}

// BenchmarkMessageTracing measures a message's way through a receiver
// (messagePath) with tracing off, for a record without trace context (the
// baseline: every Wow record, which carries no Kafka headers) and one with
// a traceparent (propagated to the handler's context), and with spans on
// (every span sampled, exported to nowhere). allocs/op and B/op are per
// message; off/plain is what the path costs without tracing.
func BenchmarkMessageTracing(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sdktrace.NewSimpleSpanProcessor(tracetest.NewNoopExporter())))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	for _, c := range []struct {
		name    string
		tracer  trace.Tracer
		headers []kgo.RecordHeader
	}{
		{"tracing=off/record=plain", nil, nil},
		{"tracing=off/record=traceparent", nil, traceparentHeader},
		{"tracing=on/record=plain", tp.Tracer("bench"), nil},
		{"tracing=on/record=traceparent", tp.Tracer("bench"), traceparentHeader},
	} {
		b.Run(c.name, func(b *testing.B) {
			mp := newMessagePath(b, c.tracer, c.headers)
			b.ReportAllocs()
			for i := range b.N {
				mp.one(int64(i))
			}
			if (c.tracer != nil || c.headers != nil) != mp.sc.IsValid() {
				b.Fatalf("the handler saw span context %v", mp.sc)
			}
		})
	}
}

// TestTracingOffCostsNoAllocation: with tracing off, the trace hooks of
// the per-message path allocate nothing for a record without trace
// context. The hooks are measured alone, run as the path runs them
// (BenchmarkMessageTracing has the whole path).
func TestTracingOffCostsNoAllocation(t *testing.T) {
	mp := newMessagePath(t, nil, []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/json")}})
	j := newJob(mp.r, mp.p, mp.rec, 0)
	tc := newTry(mp.p)
	hooks := testing.AllocsPerRun(1000, func() {
		j.traceEnter()
		j.traceStart()
		tc.vals = j.traceValues()
		_ = trace.SpanContextFromContext(tc)
		j.traceRetry(1, handler.Transient, nil, 0)
		mp.r.traceRetrying(&j.msg, 1, nil, 0)
		j.traceEnd(metrics.Handled)
	})
	if hooks != 0 {
		t.Errorf("the trace hooks with tracing off allocate %v times per message, want 0", hooks)
	}
	offset := int64(0)
	path := testing.AllocsPerRun(1000, func() { mp.one(offset); offset++ })
	t.Logf("the whole per-message path allocates %v times per message with tracing off", path)
}
