package daemon

import (
	"context"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/wowd/wowd/internal/testwait"
)

// TestStopWithCollectorHung: a collector that takes connections and never
// answers makes the last spans' flush time out; the stop is still clean (no
// error: wowd exits 0 on SIGTERM) and bounded. Before, Stop returned the
// flush's error and a clean drain exited 1.
func TestStopWithCollectorHung(t *testing.T) {
	flush := tracingFlushTimeout
	tracingFlushTimeout = 500 * time.Millisecond
	t.Cleanup(func() { tracingFlushTimeout = flush })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c) // read nothing, answer nothing
		}
	}()
	defer func() {
		// The exporter's last export outlives Stop until the collector
		// answers or goes: it goes, and the test waits for the exporter's
		// goroutine to end (it logs as it does).
		_ = ln.Close()
		<-accepted
		testwait.For(t, 10*time.Second, "the span exporter's goroutine ended", func() bool {
			buf := make([]byte, 1<<20)
			return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "batchSpanProcessor")
		})
	}()

	run := startTraceRun(t, "  tracing:\n    enabled: true\n    exporter: otlp-http\n    endpoint: http://"+ln.Addr().String()+"\n", nil)
	run.produce(t, "cart-1", "traceparent", producerTP)
	run.request(t)
	testwait.For(t, 30*time.Second, "cart-1 handled", func() bool { return run.outcomes(t, "handled") >= 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	err = run.rt.Stop(ctx)
	run.rt = nil
	if err != nil {
		t.Errorf("Stop after a clean drain returned %v: wowd would exit 1 on SIGTERM", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Stop took %v with the span flush bounded to %v", took, tracingFlushTimeout)
	}
}
