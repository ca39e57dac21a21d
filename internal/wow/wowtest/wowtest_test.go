package wowtest_test

import (
	"encoding/json"
	"testing"

	"github.com/wowd/wowd/internal/wow"
	"github.com/wowd/wowd/internal/wow/wowtest"
)

// The stream is a valid Wow event stream with the names given, JSON as
// encoding/json reads it, and of the size the benchmarks claim.
func TestEventStream(t *testing.T) {
	for _, version := range []int64{1, 42, 123456789} {
		v := wowtest.EventStream("example-service", "cart", "cart-00042", version)
		if !json.Valid(v) {
			t.Fatalf("not JSON: %s", v)
		}
		m, err := wow.Decode(wow.KindEvent, v)
		if err != nil {
			t.Fatal(err)
		}
		if m.ContextName != "example-service" || m.AggregateName != "cart" || m.AggregateID != "cart-00042" ||
			m.Version != version || len(m.Events) != 1 || m.Events[0] != "cart_item_added" || len(m.Header) != 2 {
			t.Fatalf("decoded %+v", m)
		}
		if version == 42 && (len(v) < 440 || len(v) > 500) {
			t.Fatalf("%d bytes, want about 470", len(v))
		}
	}
}
