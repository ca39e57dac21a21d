package daemon

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/wowd/wowd/handler"
)

// TestStopIsNotHeldByACallerStalledInItsBody: the ingest shares the
// metrics listener; a caller sends its headers and part of its body, then
// stalls (a paused sidecar). A stop with a 2 s deadline must still return
// within its bound: the ingest's drain waits out the deadline for the
// request, then the metrics listener closes what is still open after its
// grace. (Found by review: the stop waited until the caller closed its
// connection, however long.)
func TestStopIsNotHeldByACallerStalledInItsBody(t *testing.T) {
	c := newCluster(t, kfake.SeedTopics(2, "wow.example.cart.event"))
	cnt := &counter{n: map[string]int{}}
	var reg handler.Registry
	reg.Register(cnt.spec())
	rt := startInstance(t, c, &reg)

	conn, err := net.Dial("tcp", rt.MetricsAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/messages/event HTTP/1.1\r\nHost: wowd\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"id\":")
	time.Sleep(300 * time.Millisecond) // the request is under way, reading its body

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	done := make(chan error, 1)
	began := time.Now()
	go func() { done <- rt.Stop(ctx) }()
	select {
	case err := <-done:
		t.Logf("stopped in %v: %v", time.Since(began).Round(time.Millisecond), err)
	case <-time.After(20 * time.Second):
		t.Fatal("Stop (deadline 2 s) had not returned after 20 s with a caller stalled in its body")
	}
}
