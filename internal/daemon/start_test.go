package daemon

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
)

// blackHole accepts connections and never answers: a broker that is
// reachable but does not respond. It closes what it accepted at the end of
// the test.
func blackHole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		done  = make(chan struct{})
	)
	go func() { // owned by the test: ends when the listener closes
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestStopDuringStartWaitsForNoBroker checks that a stop asked while the
// receivers start against a broker that does not answer ends Start soon:
// each receiver asks Kafka for its dead-letter topics and producer ID first,
// up to 10 s each, and they did so one after another, so with three
// dispatchers SIGTERM took about a minute, whatever the shutdown timeout.
func TestStopDuringStartWaitsForNoBroker(t *testing.T) {
	var reg handler.Registry
	reg.Register(handler.Spec{Name: "discard", New: func(any, handler.Deps) (handler.Handler, error) {
		return handler.Sync(func(context.Context, *handler.Message) error { return nil }), nil
	}})
	cfg, err := config.Parse(fmt.Appendf(nil, `
wow:
  service: projector
  kafka:
    bootstrap-servers: [%s]
  contexts:
    example-service:
      alias: example
      aggregates: [cart]
  dispatchers:
    one: {topics: [event], handler: {type: discard}}
    two: {topics: [event], handler: {type: discard}}
    three: {topics: [event], handler: {type: discard}}
  metrics:
    listen: ""
`, blackHole(t)), "test.yaml", &reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := New(cfg, &reg, zaptest.NewLogger(t), "test")
	if err != nil {
		t.Fatal(err)
	}
	ctx, signal := context.WithCancel(context.Background())
	time.AfterFunc(500*time.Millisecond, signal)
	start := time.Now()
	rt.Start(ctx)
	took := time.Since(start)
	stopCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	stopErr := rt.Stop(stopCtx)
	t.Logf("Start returned %v after it began, Stop: %v", took, stopErr)
	// One receiver alone waits 10 s for each answer without the signal.
	if took > 5*time.Second {
		t.Fatalf("Start took %v; the stop signal came after 500ms", took)
	}
}
