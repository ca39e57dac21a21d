package receiver

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wowd/wowd/handler"
)

// The exception for a message whose own failures began a backoff
// (streak.overlapped) must not cover one that others' failures began (a
// first version of 254b5d9 did; a review of it wrote this test). In a real outage in
// which one request gets through (the sink flaps once), every message held
// before that success whose next attempt is in flight when the next
// backoff begins (begun by the failures of the others) is dead-lettered,
// though the sink is down: beyond the "at most four in a row" before a
// backoff starts that docs/operations.md allows.
func TestAFlapDoesNotDeadLetterTheHeldMessagesOfAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		produceAt(t, h.c, testTopic, 0, distinctKeys("agg", 200)...)
		var flap, flapped atomic.Bool
		hd := handlerFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
			var err error = handler.Classed(handler.Transient, errors.New("503: down"))
			if flap.Load() && flapped.CompareAndSwap(false, true) {
				err = nil // one request gets through
			}
			time.AfterFunc(500*time.Millisecond, func() { ack.Done(err) }) // a request's time
		})
		r := h.receiver("g-flap", hd, 256, func(o *Options) { o.RetryBackoff = time.Second })
		time.Sleep(time.Minute)
		before := len(dlqRecords(t, h.c, testTopic+".dlq", 0))
		flap.Store(true)
		time.Sleep(time.Minute)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = r.Stop(ctx)
		cancel()
		after := len(dlqRecords(t, h.c, testTopic+".dlq", 0))
		t.Logf("dead letters before the flap %d, after it %d", before, after-before)
		if after-before > 0 {
			t.Errorf("one success in an outage let %d held messages be dead-lettered (none before the change: a held message whose attempt overlapped a backoff stayed held)", after-before)
		}
	})
}

// The same in a degraded sink that answers one request in 20 (the
// rest 503): each success ends the backoff, and each held message whose
// attempt is in flight when the next one begins is dead-lettered.
func TestADegradedSinkDoesNotDeadLetterHeldMessages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		produceAt(t, h.c, testTopic, 0, distinctKeys("agg", 200)...)
		var calls, ok atomic.Int64
		hd := handlerFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
			var err error = handler.Classed(handler.Transient, errors.New("503: down"))
			if calls.Add(1)%20 == 0 {
				err = nil
				ok.Add(1)
			}
			time.AfterFunc(500*time.Millisecond, func() { ack.Done(err) })
		})
		r := h.receiver("g-degraded", hd, 256, func(o *Options) { o.RetryBackoff = time.Second })
		time.Sleep(2 * time.Minute)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = r.Stop(ctx)
		cancel()
		dl := len(dlqRecords(t, h.c, testTopic+".dlq", 0))
		t.Logf("calls %d, handled %d, dead letters %d", calls.Load(), ok.Load(), dl)
		// Before 254b5d9: 12 dead letters (the few before each new
		// backoff starts); with its first version: 61 of the 200.
		if dl > 20 {
			t.Errorf("a degraded sink (1 request in 20 answered) dead-lettered %d of 200 good messages in 2 minutes", dl)
		}
	})
}
