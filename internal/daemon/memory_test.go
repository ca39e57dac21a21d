package daemon

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/zap"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
)

// A receiver's client fetches as soon as it is made, so each receiver sizes
// its first fetch in New: to its part of the memory budget among all the
// receivers of the configuration, not among those made before it (the
// first would take the whole budget, the second half of it, ...).
func TestReceiversSizeTheirFirstFetchesToEqualParts(t *testing.T) {
	c := newCluster(t, kfake.AllowAutoTopicCreation())
	rec := &recorder{got: map[string][]handler.Message{}}
	var reg handler.Registry
	reg.Register(rec.spec())
	cfg, err := config.Parse(fmt.Appendf(nil, `
wow:
  service: projector
  kafka:
    bootstrap-servers: [%s]
  memory:
    limit: 512MiB
  contexts:
    example-service:
      alias: example
      aggregates: [cart]
  dispatchers:
    a: {topics: [event], handler: {type: record}}
    b: {topics: [event], handler: {type: record}}
    c: {topics: [event], handler: {type: record}}
  metrics:
    listen: ""
`, c.ListenAddrs()[0]), "test.yaml", &reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	// No test logger: the receivers' Kafka clients, closed by abort
	// without having started, may still log a dial to the closing broker
	// after the test returned (kgo does not wait for a connection being
	// opened), which a test logger turns into a panic.
	rt, err := New(cfg, &reg, zap.NewNop(), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer rt.abort() // never started
	if len(rt.receivers) != 3 {
		t.Fatalf("%d receivers; want 3", len(rt.receivers))
	}
	var limits []int64
	for _, r := range rt.receivers {
		limits = append(limits, r.Snapshot().FetchMaxBytes)
	}
	// 512 MiB × 10% ÷ 3 receivers, half of it for the next fetch while the
	// receiver holds the last, ÷ 16 (the compression assumed before any
	// batch): below the configured fetch-max-bytes.
	want := int64(512<<20) / 100 * 10 / 3 / 2 / 16
	for i, got := range limits {
		if got != want {
			t.Errorf("receiver %d of 3 sized its first fetch to %d bytes; want half of a third of the fetch budget at 16x: %d (all: %v)", i+1, got, want, limits)
		}
	}
}
