package wow

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/wowd/wowd/internal/wow/wowtest"
)

// routeSeeds are values that exercise Route's paths: escapes (read through
// Decode), duplicates, compensation headers, bodies that are not arrays of
// events, structures cut short.
var routeSeeds = []string{
	`{"id":"i","contextName":"c","aggregateName":"a","aggregateId":"k","name":"n","header":{"a":"b"}}`,
	`{"id":"i","contextName":"c","aggregateName":"a","aggregateId":"k","body":[{"name":"e"}],"version":1e0}`,
	`{"aggregate\u0049d":"\ud83d\ude00","id":"\ud800","contextName":"c","aggregateName":"a","body":[]}`,
	"{\"id\":\"\xff\",\"contextName\":\"c\xff\",\"aggregateName\":\"a\",\"aggregateId\":\"k\",\"name\":\"n\",\"header\":{\"\xfe\":1,\"\xff\":\"v\"}}",
	`{"id":"i","contextName":"c","aggregateName":"a","aggregateId":"k","body":[{"name":"e","body":{"name":"inner"}},{"id":"x","name":"f"}]}`,
	`{"id":"i","contextName":"c","aggregateName":"a","aggregateId":"k","header":{"compensate.id":"x","compensate.processor":"p"},"body":[{"name":"e"}]}`,
	`{"id":"i","contextName":"c","aggregateName":"a","aggregateId":"k","header":{"compensate.id":"x","compensate\u002eprocessor":"p"},"body":[{"name":"e"}]}`,
	`{"id":"i","contextName":"c","aggregateName":"a","aggregateId":"k","header":{"compensate.processor":"p"},"header":{"compensate.id":"x"},"body":[{"name":"e"}]}`,
	`{"id":"i","contextName":"c","aggregateName":"a","aggregateId":"k","header":{"compensate.id":"x","compensate.context":"s","compensate.processor":"p","compensate.context":"t"},"body":[{"name":"e"}]}`,
	`{"id":"i","contextName":"c","aggregateName":"a","aggregateId":"k","header":{"compensate.id":"x","compensate.context":"s\u0074","compensate.processor":7},"body":[{"name":"e"}]}`,
	`{"id":"i","contextName":"c","contextName":"d","aggregateName":"a","aggregateId":"k","body":[1,{"name":"e"}]}`,
	`{"id":"i","contextName":"c","aggregateName":"a","aggregateId":"","body":[{"name":"e"}]}`,
	`{"id":"i","contextName":"c","aggregateName":"a","aggregateId":"k","body":{"name":"e"}}`,
	`{"id":"i","contextName":"c","aggregateName":"a","aggregateId":"k","body":[{"name":"e\"q"}]}`,
	`{"id":"i","contextName":"c","aggregateName":"a","aggregateId":"k","body":[{"name":"e"}`,
	`{"id":"i","contextName":"c \\" } ]","aggregateName":"a","aggregateId":"k","name":"n"}`,
	`  {"id" : "i" , "contextName" : "c" , "aggregateName" : "a" , "aggregateId" : "k" , "name" : "n" }  `,
	`{"id":"i","contextName":"c","aggregateName":"a","aggregateId":"k","body":[{"name":"e","body":{"t":"say \"hi\" \\","u":"\\\"}]"}}]}`,
	`{"id":"i","contextName":"c","aggregateName":"a","aggregateId":"k\\","body":[{"name":"e\\\\"}]}`,
	`[{"contextName":"c"}]`, `"x"`, `{}`, ``, `{"contextName":}`,
}

// FuzzRoute holds Route to Decode: Scan never panics; whatever Decode
// accepts, Scan accepts, with and without event names, and reads the same
// names, event names and compensation target; Check agrees with
// Message.Check. (Scan may accept what Decode rejects: it does not validate
// what it skips.)
func FuzzRoute(f *testing.F) {
	for _, fx := range loadFixtures(f) {
		if v := fx.value(f); len(v) <= 16<<10 {
			f.Add(uint8(fx.kind(f)), v)
		}
	}
	for _, seed := range routeSeeds {
		for k := range uint8(3) {
			f.Add(k+1, []byte(seed))
		}
	}
	f.Fuzz(func(t *testing.T, k uint8, value []byte) {
		kind := Kind(k%3 + 1)
		var full Message
		ferr := full.Decode(kind, value)
		var r, re Route
		err := r.Scan(kind, value, false)
		eerr := re.Scan(kind, value, true)
		if ferr != nil {
			return // Scan may accept or reject
		}
		if err != nil || eerr != nil {
			t.Fatalf("Decode accepts %q, Scan rejects it: %v / with events: %v", value, err, eerr)
		}
		for _, r := range []*Route{&r, &re} {
			if r.ContextName() != full.ContextName || r.AggregateName() != full.AggregateName ||
				r.AggregateID() != full.AggregateID || r.Name() != full.Name {
				t.Fatalf("%q: Scan reads %q %q %q %q, Decode %q %q %q %q", value,
					r.ContextName(), r.AggregateName(), r.AggregateID(), r.Name(),
					full.ContextName, full.AggregateName, full.AggregateID, full.Name)
			}
			cx, p, ok := r.Compensation()
			c, fok := full.Compensation()
			if kind == KindCommand {
				fok, c = false, Compensation{}
			}
			if ok != fok || p != c.Processor || cx != c.Context {
				t.Fatalf("%q: Scan reads compensation %v %q %q, Decode %v %q %q", value, ok, cx, p, fok, c.Context, c.Processor)
			}
			for _, key := range []string{full.AggregateID, "other"} {
				for _, names := range [][2]string{{full.ContextName, full.AggregateName}, {"x", full.AggregateName}, {full.ContextName, "y"}} {
					if e1, e2 := errText(r.Check([]byte(key), names[0], names[1])), errText(full.Check([]byte(key), names[0], names[1])); e1 != e2 {
						t.Fatalf("%q: Check gives %q, Message.Check %q", value, e1, e2)
					}
				}
			}
		}
		var events []string
		for i := range re.Events() {
			events = append(events, re.Event(i))
		}
		if kind != KindCommand && !slices.Equal(events, full.Events) {
			t.Fatalf("%q: Scan reads events %q, Decode %q", value, events, full.Events)
		}
	})
}

// Route reads the fixtures as Decode does, with a Route reused across
// them, and rejects what is not a Wow message of the kind.
func TestRouteFixtures(t *testing.T) {
	var r Route
	for _, fx := range loadFixtures(t) {
		v, kind := fx.value(t), fx.kind(t)
		m, ferr := Decode(kind, v)
		err := r.Scan(kind, v, true)
		if ferr != nil {
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", fx.File, err)
		}
		if r.ContextName() != m.ContextName || r.AggregateID() != m.AggregateID || r.Events() != len(m.Events) {
			t.Fatalf("%s: read %q %q %d events", fx.File, r.ContextName(), r.AggregateID(), r.Events())
		}
	}
	for _, bad := range []struct{ value, want string }{
		{`{"contextName":"c","aggregateName":"a","body":[]}`, "missing aggregateId"},
		{`{"contextName":"c","aggregateName":"a","aggregateId":7,"body":[]}`, "aggregateId is a number, want a string"},
		{`{"contextName":"c","aggregateName":"a","aggregateId":"k"}`, "missing body"},
		{`{"contextName":"c","aggregateName":"a","aggregateId":"k","body":[{"id":1}]}`, "body[0] has no name"},
		{`{"contextName":"c","aggregateName":"a","aggregateId":"k","body":[3]}`, "body[0] is a number, want an event object"},
		{`{"contextName":"c","aggregateName":"a","aggregateId":"k","body":[{"name":"e"}]`, "invalid JSON"},
		{`{"contextName":"c","aggregateName":"a","aggregateId":"k","body":[]} x`, "invalid JSON"},
	} {
		err := r.Scan(KindEvent, []byte(bad.value), true)
		if err == nil || !contains(err.Error(), bad.want) {
			t.Errorf("%s: got %v, want %q", bad.value, err, bad.want)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestRouteEscapesAtEveryLength moves an escaped aggregateId across block
// and window boundaries: padded to every length around 64, 128 and one
// window (1 KiB, up to which the index says whether the value has a
// backslash; past it Scan searches the value), Scan must read what Decode
// reads, the unescaped id, and the plain id where nothing is escaped.
func TestRouteEscapesAtEveryLength(t *testing.T) {
	var r Route
	for _, id := range []string{`k`, `k\u0041`, `k\\`, `k\"`, `\/`} {
		for _, around := range []int{64, 128, indexWindow * 64, 2 * indexWindow * 64} {
			for length := around - 80; length <= around+80; length++ {
				head := `{"id":"i","contextName":"c","aggregateName":"a","aggregateId":"` + id + `","body":[{"name":"e"}],"pad":"`
				pad := length - len(head) - 2
				if pad < 0 {
					continue
				}
				v := []byte(head + strings.Repeat("x", pad) + `"}`)
				m, err := Decode(KindEvent, v)
				if err != nil {
					t.Fatalf("Decode(%s): %v", v, err)
				}
				if err := r.Scan(KindEvent, v, true); err != nil {
					t.Fatalf("Scan of %d bytes: %v", len(v), err)
				}
				if r.AggregateID() != m.AggregateID || r.Events() != 1 || r.Event(0) != "e" {
					t.Fatalf("Scan of %d bytes (id %s) read %q, %d events; Decode read %q", len(v), id, r.AggregateID(), r.Events(), m.AggregateID)
				}
			}
		}
	}
}

// eventStream470 is a domain event stream of one event as Wow writes it,
// 470 bytes (the size of internal/wow/wowtest's).
const eventStream470 = `{"id":"0U8ksndh6c8417","contextName":"example-service","aggregateName":"cart","header":{"trace_id":"0U7K3b1c42","upstream_name":"add_cart_item"},"aggregateId":"cart-00042","tenantId":"(0)","ownerId":"0U7K1user0009","spaceId":"","commandId":"0U7K3b1c42","requestId":"0U7K3b1c42","version":42,"body":[{"id":"0U7K3b2d42","name":"cart_item_added","revision":"0.0.1","bodyType":"cart.CartItemAdded","body":{"productId":"product-42","quantity":3}}],"createTime":1755868600242}`

// BenchmarkRoute measures Route.Scan and Check on a 470-byte event stream
// (the routing path of every record), with and without event names, next
// to the full Decode.
func BenchmarkRoute(b *testing.B) {
	value := []byte(eventStream470)
	key := []byte("cart-00042")
	for _, events := range []bool{false, true} {
		b.Run("scan/events="+strconv.FormatBool(events), func(b *testing.B) {
			b.SetBytes(int64(len(value)))
			b.ReportAllocs()
			var r Route
			for b.Loop() {
				if err := r.Scan(KindEvent, value, events); err != nil {
					b.Fatal(err)
				}
				if err := r.Check(key, "example-service", "cart"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	// The same shape of message, 8,192 of them, each with its own aggregate
	// id, version and length (3.8 MB in all, more than this machine's L2):
	// each scan reads a value that is not in the core's nearest caches and
	// takes branches the last scan did not, as in the receiver. The check
	// against each message's key is left out.
	var varied [][]byte
	for k := range 8192 {
		varied = append(varied, wowtest.EventStream("example-service", "cart", "cart-"+strconv.Itoa(k*7919%100_000), int64(1+k*31%5000)))
	}
	b.Run("scan/events=true/varied", func(b *testing.B) {
		b.SetBytes(int64(len(varied[0])))
		b.ReportAllocs()
		var r Route
		k := 0
		for b.Loop() {
			if err := r.Scan(KindEvent, varied[k], true); err != nil {
				b.Fatal(err)
			}
			k = (k + 1) % len(varied)
		}
	})
	// A state event's state is skipped: here 500 KB of it.
	state, err := os.ReadFile(filepath.Join("testdata", "records", "state-large.json"))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("scan/state-500KB", func(b *testing.B) {
		b.SetBytes(int64(len(state)))
		b.ReportAllocs()
		var r Route
		for b.Loop() {
			if err := r.Scan(KindState, state, true); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(value)))
		b.ReportAllocs()
		var m Message
		for b.Loop() {
			if err := m.Decode(KindEvent, value); err != nil {
				b.Fatal(err)
			}
			if err := m.Check(key, "example-service", "cart"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A domain event stream is no state event, to Decode and to Scan alike.
// Wow's StateEventJsonDeserializer takes the value's "state" as an object
// and reads "deleted" at once, so a record of a .state topic without them
// does not decode there; Decode and Scan took it as a state event and
// handed it to a state handler, which got no state. Found by review.
func TestAnEventStreamIsNoStateEvent(t *testing.T) {
	stream := []byte(eventStream470)
	if _, err := Decode(KindState, stream); err == nil {
		t.Errorf("Decode(KindState) accepts a domain event stream (no state, no deleted)")
	}
	var r Route
	if err := r.Scan(KindState, stream, true); err == nil {
		t.Errorf("Route.Scan(KindState) accepts a domain event stream (no state, no deleted)")
	}
}

// A value that repeats its header member is scanned in time linear in its
// size: each of its 64-byte blocks is indexed about once. Reading each
// header key by key after skipping it indexed the value again from its
// start, once per header (a 3.8 MB value of 80,000 headers took 376 ms, 60
// times its Decode). The last header decides the compensation, as Decode
// reads it.
func TestRouteIndexesARepeatedHeaderOnce(t *testing.T) {
	var r Route
	for _, tc := range []struct{ name, header, last string }{
		{"compensation", `"header":{"compensate.id":"x","p":"yyyyyyyyyy"},`, `"header":{"compensate.id":"x","compensate.context":"c2"},`},
		{"plain", `"header":{"q":"x","p":"yyyyyyyyyy"},`, `"header":{"q":"z"},`},
		{"escaped", `"header":{"q":"x\"","p":"yyyyyyyyyy"},`, `"header":{"compensate.id":"x","compensate.context":"c2"},`},
	} {
		for _, n := range []int{1, 2, 100, 20000} {
			v := []byte(`{"id":"i","contextName":"c","aggregateName":"a","aggregateId":"k",` +
				strings.Repeat(tc.header, n) + tc.last + `"body":[{"name":"e"}]}`)
			m, err := Decode(KindEvent, v)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Scan(KindEvent, v, true); err != nil {
				t.Fatalf("%s × %d: %v", tc.name, n, err)
			}
			c, p, ok := r.Compensation()
			mc, mok := m.Compensation()
			if ok != mok || c != mc.Context || p != mc.Processor {
				t.Errorf("%s × %d: compensation %q %q %v, Decode reads %+v %v", tc.name, n, c, p, ok, mc, mok)
			}
			blocks := (len(v) + 63) / 64
			if r.indexed > 2*blocks+indexWindow {
				t.Errorf("%s × %d: %d blocks indexed for a value of %d", tc.name, n, r.indexed, blocks)
			}
		}
	}
}
