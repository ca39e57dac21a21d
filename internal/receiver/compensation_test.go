package receiver

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/testwait"
	"github.com/wowd/wowd/internal/wow/wowtest"
)

// compensated returns the event stream of version v of key as Wow's
// compensation resends it: the same stream, its header carrying the
// target (CompensationMatcher.withCompensation: compensate.id, .context,
// .processor, .function). The harness's receivers are dispatcher "d" of
// service "svc".
func compensated(key string, v int64, context, processor string) []byte {
	return bytes.Replace(wowtest.EventStream("shop", "cart", key, v), []byte(`"header":{`),
		[]byte(`"header":{"compensate.id":"0U8comp1","compensate.context":"`+context+`","compensate.processor":"`+processor+`","compensate.function":"onCartItemAdded",`), 1)
}

// stateEvent returns the state event of version v of key, with more header
// fields (written with their trailing comma).
func stateEvent(key string, v int64, header string) []byte {
	s := bytes.Replace(wowtest.EventStream("shop", "cart", key, v), []byte(`"body":[`),
		[]byte(`"firstOperator":"","firstEventTime":1,"state":{"id":"`+key+`"},"tags":{},"deleted":false,"body":[`), 1)
	return bytes.Replace(s, []byte(`"header":{`), []byte(`"header":{`+header), 1)
}

func produceRaw(t *testing.T, h *harness, key string, values ...[]byte) {
	t.Helper()
	cl, err := kgo.NewClient(brokers(h.c)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, v := range values {
		if err := cl.ProduceSync(t.Context(), &kgo.Record{Topic: testTopic, Key: []byte(key), Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// handledOffsets runs a receiver with opts over values, all of cart-1,
// and returns the offsets its handler got, in order.
func handledOffsets(t *testing.T, group string, opts func(*Options), values ...[]byte) []int64 {
	h := newVirtualHarness(t, 1)
	produceRaw(t, h, "cart-1", values...)
	var (
		mu  sync.Mutex
		got []int64
	)
	hd := handlerFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
		mu.Lock()
		got = append(got, m.Offset)
		mu.Unlock()
		ack.Done(nil)
	})
	r := h.receiver(group, hd, 16, opts)
	testwait.For(t, 30*time.Second, "every record finished", func() bool { return h.committedAtEnd(group) })
	stop(t, r)
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(got)
}

// An event stream resent as a compensation reaches only the dispatcher it
// names, in the service it names, as Wow's event dispatchers run only the
// function it names: every wowd dispatcher handled every compensation of
// any Wow processor again (the rule was applied to state events only), and
// one aimed at this dispatcher was skipped as a duplicate by the version
// check, so it did nothing. Decoded and scanned alike. Found by review.
func TestAnEventStreamCompensationReachesOnlyItsTarget(t *testing.T) {
	stream := func(v int64) []byte { return wowtest.EventStream("shop", "cart", "cart-1", v) }
	for _, tc := range []struct {
		name string
		opts func(*Options)
	}{
		{"decoded", func(o *Options) { o.Wow = true }},
		{"scanned", func(o *Options) { o.Wow, o.WowRoutingOnly = true, true }},
		{"version-checked", wowOpts},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				got := handledOffsets(t, "g-comp-"+tc.name, tc.opts, stream(1), stream(2),
					compensated("cart-1", 1, "svc", "OtherProjector"), // another processor
					compensated("cart-1", 1, "billing", "d"),          // another service's d
					compensated("cart-1", 1, "svc", "d"),              // this one
				)
				if want := []int64{0, 1, 4}; !slices.Equal(got, want) {
					t.Fatalf("handled offsets %v, want %v: only the compensation for d of svc (4), past the version check", got, want)
				}
			})
		})
	}
}

// A state event resent as a compensation reaches the dispatcher it names
// only in the service it names: Wow's CompensationMatcher requires the
// context as well as the processor, and wowd compared the processor only,
// so a resend for a processor "d" of any Wow service reached dispatcher d of
// every wowd service. Found by review.
func TestAStateCompensationReachesOnlyItsTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		got := handledOffsets(t, "g-comp-state", func(o *Options) {
			o.Wow = true
			rt := o.Routes[testTopic]
			rt.Kind = handler.KindState
			o.Routes = map[string]Route{testTopic: rt}
		},
			stateEvent("cart-1", 1, ""),
			stateEvent("cart-1", 1, `"compensate.id":"c2","compensate.context":"billing-service","compensate.processor":"d","compensate.function":"onStateEvent",`),
			stateEvent("cart-1", 1, `"compensate.id":"c3","compensate.context":"svc","compensate.processor":"p","compensate.function":"onStateEvent",`),
			stateEvent("cart-1", 2, `"compensate.id":"c4","compensate.context":"svc","compensate.processor":"d","compensate.function":"onStateEvent",`),
		)
		if want := []int64{0, 3}; !slices.Equal(got, want) {
			t.Fatalf("handled offsets %v, want %v: only the compensation for d of svc (3)", got, want)
		}
	})
}
