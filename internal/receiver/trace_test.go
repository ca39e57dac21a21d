package receiver

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/testwait"
)

// TestHandlerContextCarriesTheRecordsTraceContext: every try of a record
// with a valid traceparent gets a context whose span context is the
// producer's (what OpenTelemetry instrumentation in a plugin reads), and a
// record without one gets none.
func TestHandlerContextCarriesTheRecordsTraceContext(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	h := newHarness(t, 1)
	cl, err := kgo.NewClient(brokers(h.c)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(),
		&kgo.Record{Topic: testTopic, Key: []byte("traced"), Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte(tp)}}},
		&kgo.Record{Topic: testTopic, Key: []byte("plain")},
	).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex // guards got
		got = map[string][]trace.SpanContext{}
	)
	hd := handlerFunc(func(ctx context.Context, m *handler.Message, ack handler.Ack) {
		mu.Lock()
		got[m.AggregateID] = append(got[m.AggregateID], trace.SpanContextFromContext(ctx))
		n := len(got[m.AggregateID])
		mu.Unlock()
		if n == 1 {
			ack.Done(errors.New("first try fails")) // held and tried again
			return
		}
		ack.Done(nil)
	})
	r := h.receiver("g-trace", hd, 16, func(o *Options) { o.DeadLetter.Enabled = false })
	defer stop(t, r)
	testwait.For(t, 30*time.Second, "both records tried twice", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got["traced"]) >= 2 && len(got["plain"]) >= 2
	})
	mu.Lock()
	defer mu.Unlock()
	for i, sc := range got["traced"] {
		if !sc.IsRemote() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" || !sc.IsSampled() {
			t.Errorf("try %d of the traced record: span context %+v", i+1, sc)
		}
	}
	for i, sc := range got["plain"] {
		if sc.IsValid() {
			t.Errorf("try %d of the record without traceparent: span context %+v", i+1, sc)
		}
	}
}
