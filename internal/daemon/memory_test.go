package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"
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

// TestASmallContainerNamesWhereTheLimitCameFrom: with wow.memory.limit
// unset the limit is 80% of the container's; below the minimum, wowd
// refused to start with an error on wow.memory, a key the user never set,
// and no word of the container. It names the limit's source now.
func TestASmallContainerNamesWhereTheLimitCameFrom(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "memory.max"), []byte("33554432\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := cgroupRoot
	cgroupRoot = root
	defer func() { cgroupRoot = old }()
	rt, err := newOneDispatcher(t, "")
	if err == nil {
		stopRT(t, rt)
		t.Fatal("started with 80% of a 32 MiB container, below the minimum")
	}
	var ce *ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "container") || !strings.Contains(err.Error(), "33554432") {
		t.Errorf("error %v; want a configuration error naming the container's limit", err)
	}
}

// TestARefusedTracingSetUpStopsWhatRuns: New made the executor, then
// refused a tracing set-up it could not build (here an
// OTEL_RESOURCE_ATTRIBUTES entry without "="), and returned with the
// executor's goroutines running.
func TestARefusedTracingSetUpStopsWhatRuns(t *testing.T) {
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "no-equals-sign")
	before := goleak.IgnoreCurrent() // what earlier tests left winding down
	rt, err := newOneDispatcher(t, "  tracing:\n    enabled: true\n")
	if err == nil {
		stopRT(t, rt)
		t.Fatal("started with a resource attribute that does not parse")
	}
	if !strings.Contains(err.Error(), "OTEL_RESOURCE_ATTRIBUTES") {
		t.Fatalf("refused for %v; want the tracing set-up's error", err)
	}
	if err := goleak.Find(before); err != nil {
		t.Errorf("after New refused the tracing set-up: %v", err)
	}
}

// newOneDispatcher is New over a configuration of one dispatcher (handler
// record) and a broker nobody listens at, with extra appended under wow.
func newOneDispatcher(t *testing.T, extra string) (*Daemon, error) {
	t.Helper()
	var reg handler.Registry
	reg.Register((&recorder{}).spec())
	cfg, err := config.Parse([]byte(`
wow:
  service: projector
  kafka:
    bootstrap-servers: [127.0.0.1:1]
  contexts:
    example-service:
      alias: example
      aggregates: [cart]
  dispatchers:
    everything:
      topics: [event]
      handler: {type: record}
  metrics:
    listen: ""
`+extra), "test.yaml", &reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return New(cfg, &reg, zap.NewNop(), "test")
}
