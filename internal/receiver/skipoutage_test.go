package receiver

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wowd/wowd/handler"
)

// A Skip or Permanent outcome is no success of the sink (a first version
// of 254b5d9 counted it so, and a review of it wrote this test). The SDK's own example (handler.ExampleClassed) skips an event type
// it does not project and refuses an undecodable payload for good without
// reaching its dependency. In a real outage (its database down: every
// projected event fails transiently) a stream that mixes such events with
// skipped ones never starts a backoff: each skip resets the run of
// failures and dilutes the failing share below 80%, so every good message
// is dead-lettered. docs/operations.md: "An outage therefore produces lag,
// not a dead-letter topic full of good messages; only the few failures
// before the backoff starts (at most four in a row) can be dead-lettered."
func TestAnOutageWithSkippedEventsStillBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		var keys []string
		for i := range 20 {
			keys = append(keys, "good-"+strconv.Itoa(i), "skip-"+strconv.Itoa(i))
		}
		produceAt(t, h.c, testTopic, 0, keys...)
		var failed atomic.Int64
		hd := handlerFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
			if strings.HasPrefix(m.AggregateID, "skip") {
				// An event type this projection does not handle: no
				// database call.
				ack.Done(handler.Classed(handler.Skip, errors.New("not projected")))
				return
			}
			failed.Add(1)
			ack.Done(handler.Classed(handler.Transient, errors.New("database down")))
		})
		r := h.receiver("g-skip-outage", hd, 64, func(o *Options) { o.RetryBackoff = time.Second })
		time.Sleep(2 * time.Minute)
		r.fails.mu.Lock()
		entered := r.fails.entered
		r.fails.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = r.Stop(ctx)
		cancel()
		dl := dlqRecords(t, h.c, testTopic+".dlq", 0)
		var good int
		for _, d := range dl {
			if strings.HasPrefix(string(d.Key), "good") {
				good++
			}
		}
		t.Logf("transient failures %d, backoffs entered %d, good messages dead-lettered %d", failed.Load(), entered, good)
		if good > streakRun-1 {
			t.Errorf("during an outage %d of 20 good messages were dead-lettered (at most %d expected before the backoff starts); backoffs entered: %d", good, streakRun-1, entered)
		}
	})
}
