package receiver

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/testwait"
)

// retryObserver hands the retries WithRetry reports to a receiver made
// after the handler (as the daemon's observer does).
type retryObserver struct{ r atomic.Pointer[Receiver] }

func (o *retryObserver) Retrying(m *handler.Message, attempt int, err error, wait time.Duration) {
	if r := o.r.Load(); r != nil {
		r.Retrying(m, attempt, err, wait)
	}
}

func (o *retryObserver) PanickedAfterOutcome(_, topic string, partition int32, offset int64, err error) {
	if r := o.r.Load(); r != nil {
		r.PanickedAfterOutcome(topic, partition, offset, err)
	}
}

// heldThenFailed fails agg-0's message transiently until its
// attempts run out (which starts the receiver's backoff: the message is
// held), lets agg-1's message succeed while agg-0's waits (which ends the
// backoff), then fails agg-0's retry permanently: it is dead-lettered.
type heldThenFailed struct {
	mu   sync.Mutex
	seen []int // attempt numbers of agg-0's message
}

func (h *heldThenFailed) Handle(ctx context.Context, m *handler.Message, ack handler.Ack) {
	h.HandleAttempt(ctx, m, 1, ack)
}

func (h *heldThenFailed) HandleAttempt(_ context.Context, m *handler.Message, attempt int, ack handler.Ack) {
	if m.AggregateID != "agg-0" {
		// Succeeds once agg-0's message is held: the backoff ends.
		time.AfterFunc(50*time.Millisecond, func() { ack.Done(nil) })
		return
	}
	h.mu.Lock()
	h.seen = append(h.seen, attempt)
	n := len(h.seen)
	h.mu.Unlock()
	if n <= 5 {
		ack.Done(handler.Classed(handler.Transient, errors.New("503 from sink")))
		return
	}
	ack.Done(handler.Classed(handler.Permanent, errors.New("422 from sink")))
}

// docs/operations.md, "Failures, retries and dead letters": a dead letter
// carries "the reason in wowd-dlq-* headers (... attempts)", and
// handler.WithAttempts says "wowd reports it on dead-letter records". A
// message held across the receiver's backoff (its attempts numbered on
// across its tries: 1..5, then 6, as wowd-attempt says) and then
// dead-lettered reports only its last try's attempts: 1, though the
// handler was called 6 times for it.
//
// Found by review.
func TestADeadLetterCountsTheAttemptsOfHeldTries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		produce(t, h.c, testTopic, 2, 2) // offset 0: agg-0, offset 1: agg-1
		obs := &retryObserver{}
		hd := &heldThenFailed{}
		wrapped := handler.WithRetry(hd, handler.RetryPolicy{MaxAttempts: 5, Initial: time.Millisecond, Max: 2 * time.Millisecond, Observer: obs})
		r := h.newReceiver("g-delivery-dlq-attempts", wrapped, 16)
		obs.r.Store(r)
		r.Start(context.Background())
		testwait.For(t, 30*time.Second, "both records finished and committed", func() bool { return h.committedAtEnd("g-delivery-dlq-attempts") })
		stop(t, r)
		hd.mu.Lock()
		seen := append([]int(nil), hd.seen...)
		hd.mu.Unlock()
		if len(seen) != 6 {
			t.Fatalf("agg-0's message was attempted %v; the scenario wants 6 attempts (5 held, 1 after the backoff)", seen)
		}
		dl := dlqRecords(t, h.c, testTopic+".dlq", 1)
		if len(dl) != 1 {
			t.Fatalf("%d dead letters, want 1", len(dl))
		}
		got := header(dl[0], HeaderAttempts)
		if got != strconv.Itoa(len(seen)) {
			t.Errorf("dead letter of a message attempted %d times (numbered %v) says %s=%s, want %d",
				len(seen), seen, HeaderAttempts, got, len(seen))
		}
	})
}

// stuckTransient fails agg-0's message transiently on every attempt; the
// others succeed.
type stuckTransient struct{}

func (stuckTransient) Handle(_ context.Context, m *handler.Message, ack handler.Ack) {
	if m.AggregateID == "agg-0" {
		ack.Done(handler.Classed(handler.Transient, errors.New("503 from sink")))
		return
	}
	ack.Done(nil)
}

// docs/operations.md, "The hot-aggregate caveat": a message that does not
// finish (a sink that keeps answering with transient errors for it: the
// http sink with max-attempts 0, which is handler.WithRetry retrying
// forever) holds its partition's commit; "When a partition's uncommitted
// span exceeds four windows, the receiver pauses that partition alone ...
// (wowd_receiver_paused_partitions, alert WowdPartitionHeld); the logs name
// the record." The WowdPartitionHeld alert says the same. No log at info
// level or above names the record: the pause's log gives the topic,
// partition and span only, and the retries are logged at debug level.
//
// Found by review.
func TestTheSpanPauseLogNamesTheRecordHoldingIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		produce(t, h.c, testTopic, 50, 50) // agg-0 at offset 0 only
		obs := &retryObserver{}
		wrapped := handler.WithRetry(stuckTransient{}, handler.RetryPolicy{MaxAttempts: 0, Initial: time.Millisecond, Max: 10 * time.Millisecond, Observer: obs})
		core, logs := observer.New(zap.InfoLevel)
		r := h.newReceiver("g-delivery-held-log", wrapped, 4, func(o *Options) {
			o.Logger = zap.New(core)
			o.HandlerTimeout = time.Minute
		})
		obs.r.Store(r)
		r.Start(context.Background())
		testwait.For(t, 30*time.Second, "the partition paused for its span", func() bool {
			ps := r.Partitions()
			return len(ps) == 1 && strings.Contains(ps[0].Paused, "span")
		})
		time.Sleep(5 * time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = r.Stop(ctx) // the stuck record is unfinished: an error is expected
		cancel()
		named := false
		var paused []observer.LoggedEntry
		for _, e := range logs.All() {
			f := e.ContextMap()
			if f["aggregate"] == "agg-0" || (f["topic"] == testTopic && f["offset"] == int64(0)) {
				named = true
			}
			if strings.HasPrefix(e.Message, "partition paused") {
				paused = append(paused, e)
			}
		}
		if len(paused) == 0 {
			t.Fatalf("no log of the partition's pause")
		}
		if !named {
			t.Errorf("the partition was held by the record at offset 0 (agg-0), but no log at info level or above names it; the pause's log: %q %v",
				paused[0].Message, paused[0].ContextMap())
		}
	})
}

// hangsOnThird numbers attempts (as the http sink does for its
// wowd-attempt header): attempts 1 and 2 fail transiently, attempt 3
// hangs until its try ends, later ones succeed.
type hangsOnThird struct {
	mu   sync.Mutex
	seen []int
}

func (h *hangsOnThird) Handle(ctx context.Context, m *handler.Message, ack handler.Ack) {
	h.HandleAttempt(ctx, m, 1, ack)
}

func (h *hangsOnThird) HandleAttempt(ctx context.Context, _ *handler.Message, attempt int, ack handler.Ack) {
	h.mu.Lock()
	h.seen = append(h.seen, attempt)
	n := len(h.seen)
	h.mu.Unlock()
	switch {
	case n <= 2:
		ack.Done(handler.Classed(handler.Transient, errors.New("503 from sink")))
	case n == 3:
		context.AfterFunc(ctx, func() { ack.Done(ctx.Err()) }) // a request that hangs until the try ends
	default:
		ack.Done(nil)
	}
}

// docs/operations.md, "At-least-once": "wowd-attempt tells retries of the
// same delivery apart (1 for the first)", and handler.WithRetry numbers a
// held message's attempts on from those of its earlier tries. A try that
// ran past handler.timeout after attempts 1 and 2 failed and attempt 3
// hung counts as one attempt: the held message's next try is numbered
// from 2 again, so the target sees attempt 2 twice (and 3 twice).
//
// Found by review.
func TestAttemptsAreNumberedOnAfterATimedOutTry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		produce(t, h.c, testTopic, 1, 1)
		obs := &retryObserver{}
		hd := &hangsOnThird{}
		wrapped := handler.WithRetry(hd, handler.RetryPolicy{MaxAttempts: 5, Initial: time.Millisecond, Max: 2 * time.Millisecond, Observer: obs})
		r := h.newReceiver("g-delivery-timeout-attempts", wrapped, 16, func(o *Options) {
			o.DeadLetter.Enabled = false // held and tried again
			o.HandlerTimeout = time.Second
			o.RetryBackoff = 100 * time.Millisecond
		})
		obs.r.Store(r)
		r.Start(context.Background())
		testwait.For(t, 30*time.Second, "the record handled and committed", func() bool { return h.committedAtEnd("g-delivery-timeout-attempts") })
		stop(t, r)
		hd.mu.Lock()
		defer hd.mu.Unlock()
		if want := []int{1, 2, 3, 4}; !slices.Equal(hd.seen, want) {
			t.Errorf("attempt numbers of one record over a timed-out try and the held try after it: %v, want %v", hd.seen, want)
		}
	})
}
