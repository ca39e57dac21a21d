package receiver

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/memory"
	"github.com/wowd/wowd/internal/testwait"
)

// docs/metrics.md: wowd_receiver_paused_partitions is "Partitions paused
// because their uncommitted span grew too long (a message stuck at the
// head)", and docs/operations.md ties it to the span cap (four windows) and
// the WowdPartitionHeld alert, whose description says "one record is not
// finishing while later records complete". A partition paused for its share
// of the window (a hot or stuck aggregate, shedStuck / pauseHolding), or
// while its parked aggregates load, has no long span: it must not be counted
// there (the hot aggregate has its own metric, wowd_receiver_max_key_backlog,
// and WowdHotAggregate). Setup as in TestStuckPartitionGivesItsHeldRecordsBack.
// Found by review.
func TestPausedPartitionsCountsOnlySpanPauses(t *testing.T) {
	h := newHarness(t, 2)
	acks := make(chan handler.Ack, 1000)
	hd := handlerFunc(func(_ context.Context, _ *handler.Message, ack handler.Ack) { acks <- ack })
	b, err := memory.New(memory.MinLimit, 1)
	if err != nil {
		t.Fatal(err)
	}
	r := h.receiver("g-paused-span-only", hd, 64, func(o *Options) { o.Fetch = b.Join() })
	stop(t, r)
	r.stopping.Store(false)
	r.closing.Store(false)
	r.onAssigned(context.Background(), r.cl, map[string][]int32{testTopic: {0, 1}})
	p := r.parts[tp{testTopic, 0}]
	r.pollRound(heldFetch(0, 0, 40, 64<<10))
	testwait.For(t, 5*time.Second, "admitted", func() bool { return len(acks) == 32 })
	(<-acks).Done(nil)
	(<-acks).Done(nil)
	testwait.For(t, 5*time.Second, "finished", func() bool { return p.pending.Load() == 30 })
	_, active, _ := r.heldState()
	if !r.holdFull(active) || !r.shedStuck() {
		t.Fatal("setup: the stuck partition did not give its held records back")
	}
	p.mu.Lock()
	reasons, span := p.paused, p.tr.span()
	p.mu.Unlock()
	if reasons&pauseShare == 0 || reasons&pauseSpan != 0 || span > r.spanCap {
		t.Fatalf("setup: partition paused for %q with span %d (cap %d): want share only", reasons, span, r.spanCap)
	}
	if n := r.Snapshot().PausedPartitions; n != 0 {
		t.Errorf("wowd_receiver_paused_partitions = %d for a partition paused for its share (span %d of cap %d): "+
			"documented as partitions paused because their uncommitted span grew too long (WowdPartitionHeld fires on it)", n, span, r.spanCap)
	}
	finishAll(t, acks, p)
	r.closePartition(p)
	r.closePartition(r.parts[tp{testTopic, 1}])
}

// docs/metrics.md: wowd_receiver_paused is "1 while the receiver's
// fetching is paused because its window is full"; docs/operations.md says
// the same ("When the window is full the receiver pauses fetching
// (wowd_receiver_paused = 1)"), and the critical WowdReceiverStalled alert
// (wowd_receiver_paused == 1 and nothing finishes) describes it as "The
// receiver's window ... has been full for 10 minutes". A receiver backing
// off from a failing sink, with a handful of messages in a window of 64,
// must not read 1 there: the backoff has its own gauge
// (wowd_receiver_backing_off) and alert. Found by review.
func TestPausedGaugeMeansAFullWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		produce(t, h.c, testTopic, 8, 8)
		var down atomic.Bool
		down.Store(true)
		hd := handler.Sync(func(_ context.Context, _ *handler.Message) error {
			if down.Load() {
				return handler.Classed(handler.Transient, errors.New("503"))
			}
			return nil
		})
		r := h.receiver("g-paused-full-only", asyncHandler{hd}, 64, func(o *Options) { o.RetryBackoff = 300 * time.Millisecond })
		testwait.For(t, 10*time.Second, "the receiver to back off", func() bool { return r.Snapshot().BackingOff })
		produce(t, h.c, testTopic, 1, 1) // wakes the poll loop, which then sees the backoff
		// Sampled as a scrape would, every 10 ms of (virtual) time.
		pausedSeen, maxInFlight := 0, 0
		for range 300 {
			time.Sleep(10 * time.Millisecond)
			s := r.Snapshot()
			maxInFlight = max(maxInFlight, s.InFlight)
			if s.Paused && s.InFlight+int(r.batch) <= s.MaxInFlight {
				pausedSeen++
			}
		}
		if pausedSeen > 0 {
			t.Errorf("wowd_receiver_paused read 1 in %d of 300 samples with at most %d of %d in flight (backing off): "+
				"documented as paused because the window is full", pausedSeen, maxInFlight, r.window)
		}
		down.Store(false)
		testwait.For(t, 60*time.Second, "every record finished", func() bool { return h.committedAtEnd("g-paused-full-only") })
		stop(t, r)
	})
}

// wowd_receiver_paused reads 1 for back-pressure: a full window, and the
// records waiting for room in it filling the memory budget (with a hung
// sink and traffic on one partition, that is how a stall looks: its share
// full, the rest held, the window half empty; WowdReceiverStalled needs
// it); 0 for a backoff or max-parked, which have gauges of their own.
// Raised by review of the change that made it mean a full window only.
func TestPausedGaugeCountsBackPressureOnly(t *testing.T) {
	h := newHarness(t, 1)
	r := h.receiver("g-paused-reasons", acking, 16)
	stop(t, r) // polls driven by hand
	for _, c := range []struct {
		why  topicPause
		want bool
	}{{pauseWindowFull, true}, {pauseRecordsHeld, true}, {pauseBackoff, false}, {pauseParkedCap, false}} {
		r.paused.Store(false)
		r.pauseTopics(c.why)
		if got := r.Snapshot().Paused; got != c.want {
			t.Errorf("paused for %d: wowd_receiver_paused %v, want %v", c.why, got, c.want)
		}
	}
}
