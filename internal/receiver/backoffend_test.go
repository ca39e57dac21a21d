package receiver

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/metrics"
	"github.com/wowd/wowd/internal/testwait"
)

// poisonOne fails agg-0's message transiently on every attempt (a target
// answering 503 to that one payload); every other message succeeds.
type poisonOne struct {
	poison, ok atomic.Int64
	produced   atomic.Int64 // when the latest other message was produced (UnixNano)
	worst      atomic.Int64 // longest wait from produced to its call
}

func (h *poisonOne) Handle(_ context.Context, m *handler.Message, ack handler.Ack) {
	if m.AggregateID == "agg-0" {
		h.poison.Add(1)
		ack.Done(handler.Classed(handler.Transient, errors.New("503 for this payload")))
		return
	}
	h.ok.Add(1)
	if d := time.Now().UnixNano() - h.produced.Load(); d > h.worst.Load() {
		h.worst.Store(d)
	}
	time.AfterFunc(10*time.Millisecond, func() { ack.Done(nil) })
}

// A single message that fails transiently on every attempt, in a
// dispatcher whose other messages succeed (the sink is up: one success
// every 30 s), with dead letters enabled and the http sink's default
// max-attempts (5 = streakRun). docs/operations.md: "only the few failures
// before the backoff starts ... can be dead-lettered" and a message that
// failed for good goes to the dead-letter topic. Yet every try of the
// message was 5 consecutive failures (4 Retrying reports + its final one),
// which started a receiver-wide backoff again each time a success ended the
// previous one, and a failure during a backoff is held, not dead-lettered:
// 1,600 attempts and 40 backoffs in 20 minutes, never dead-lettered (nor
// parked), its partition's commit behind it for good. A message held
// before a success ended a backoff is no longer protected by a backoff its
// own attempt began.
func TestAMessageFailingOnEveryTryIsDeadLetteredWhileOthersSucceed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		produceAt(t, h.c, testTopic, 0, "agg-0")
		obs := &retryObserver{}
		hd := &poisonOne{}
		wrapped := handler.WithRetry(hd, handler.RetryPolicy{MaxAttempts: 5, Initial: 200 * time.Millisecond, Max: 2 * time.Second, Observer: obs})
		m := metrics.New("test")
		r := h.newReceiver("g-poison-try", wrapped, 16, func(o *Options) {
			o.Metrics = m
			o.RetryBackoff = 2 * time.Second
		})
		obs.r.Store(r)
		r.Start(context.Background())
		backoffs := 0
		was := false
		for i := 1; i <= 40; i++ { // 20 minutes, a message every 30 s
			for range 300 {
				time.Sleep(100 * time.Millisecond)
				if b := r.fails.isFailing(); b && !was {
					backoffs++
					was = true
				} else if !b {
					was = false
				}
			}
			hd.produced.Store(time.Now().UnixNano())
			produceAt(t, h.c, testTopic, 0, "agg-"+strconv.Itoa(i))
		}
		testwait.For(t, 2*time.Minute, "the other messages handled", func() bool { return hd.ok.Load() >= 40 })
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = r.Stop(ctx)
		cancel()
		dl := dlqRecords(t, h.c, testTopic+".dlq", 0)
		t.Logf("poison attempts %d, others handled %d (the longest waited %v), backoffs entered %d, dead letters %d",
			hd.poison.Load(), hd.ok.Load(), time.Duration(hd.worst.Load()), backoffs, len(dl))
		if len(dl) == 0 {
			t.Errorf("agg-0's message failed %d attempts over 20 minutes while %d other messages succeeded, and was never dead-lettered (the receiver backed off %d times)",
				hd.poison.Load(), hd.ok.Load(), backoffs)
		}
	})
}

// A backoff ended only with a success. When the messages held during it
// ended otherwise (the sink, back, refuses them for good: a 422; or a
// Skip), the receiver stayed "backing off" for as long as nothing
// succeeded: wowd_receiver_backing_off and WowdReceiverBackingOff for an
// hour on an idle receiver that owns its partition, and a later message's
// first transient failure was held as an outage's instead of
// dead-lettered. A handler's answer for good (Permanent, Skip) shows the
// sink up, as a success does.
func TestABackoffEndsWhenItsHeldMessagesAreRefusedForGood(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		produceAt(t, h.c, testTopic, 0, "agg-0", "agg-1", "agg-2", "agg-3", "agg-4")
		var tries sync.Map // aggregate -> *atomic.Int64
		hd := handlerFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
			v, _ := tries.LoadOrStore(m.AggregateID, new(atomic.Int64))
			n := v.(*atomic.Int64).Add(1)
			switch {
			case n == 1:
				go ack.Done(handler.Classed(handler.Transient, errors.New("503")))
			case m.AggregateID != "agg-5":
				// The sink is back and refuses the held message for good.
				go ack.Done(handler.Classed(handler.Permanent, errors.New("422")))
			default:
				go ack.Done(nil)
			}
		})
		r := h.receiver("g-refused-backoff", hd, 16, func(o *Options) { o.RetryBackoff = time.Second })
		testwait.For(t, 30*time.Second, "the five records committed", func() bool { return h.committedAtEnd("g-refused-backoff") })
		time.Sleep(time.Hour) // idle, its partition assigned
		stale := r.Snapshot().BackingOff
		// A new message's first transient failure, the sink up.
		produceAt(t, h.c, testTopic, 0, "agg-5")
		testwait.For(t, 30*time.Second, "agg-5 committed", func() bool { return h.committedAtEnd("g-refused-backoff") })
		stop(t, r)
		dl := dlqRecords(t, h.c, testTopic+".dlq", 0)
		var offs []string
		for _, d := range dl {
			offs = append(offs, header(d, HeaderSourceOffset))
		}
		if stale {
			t.Errorf("an hour after the held message was refused for good (the sink answering), the idle receiver, owning its partition, still reports backing off")
		}
		if len(dl) != 5+1 {
			t.Errorf("agg-5's transient failure, an hour after the outage, was held as the outage's (not dead-lettered as the first failures of agg-0..4 were): dead letters of offsets %v", offs)
		}
	})
}

// A backoff whose held messages all went otherwise (their partition lost,
// say) has nothing left to probe the sink with: past its delay, with
// nothing in flight, the poll loop ends it before it admits what comes
// next, whose first transient failure is then its own (dead-lettered), not
// held as an outage's.
func TestABackoffWithNothingInFlightEndsPastItsDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		var tries atomic.Int64
		hd := handlerFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
			if tries.Add(1) == 1 {
				ack.Done(handler.Classed(handler.Transient, errors.New("503")))
				return
			}
			ack.Done(nil)
		})
		r := h.receiver("g-idle-backoff", hd, 16, func(o *Options) { o.RetryBackoff = time.Second })
		testwait.For(t, 10*time.Second, "assigned", func() bool { return r.Snapshot().AssignedPartitions == 1 })
		// A backoff whose messages are gone: nothing in flight.
		for range streakRun {
			r.fails.record(true, nil, time.Now())
		}
		time.Sleep(time.Minute)
		if r.Snapshot().BackingOff {
			t.Error("an idle receiver past its backoff's delay reports backing off")
		}
		produceAt(t, h.c, testTopic, 0, "agg-0")
		testwait.For(t, 30*time.Second, "agg-0 committed", func() bool { return h.committedAtEnd("g-idle-backoff") })
		stop(t, r)
		if dl := dlqRecords(t, h.c, testTopic+".dlq", 0); len(dl) != 1 || tries.Load() != 1 {
			t.Errorf("%d dead letters after %d tries: the first transient failure after the idle backoff was held as the outage's", len(dl), tries.Load())
		}
	})
}
