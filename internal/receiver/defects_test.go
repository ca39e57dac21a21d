package receiver

// Regression tests of defects found by review: each fails on the code
// before its fix.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/metrics"
	"github.com/wowd/wowd/internal/testwait"
)

// at is a record's position.
type at struct {
	p int32
	o int64
}

// produceAt writes one record per key to partition p of topic, in order.
func produceAt(t testing.TB, c *kfake.Cluster, topic string, p int32, keys ...string) {
	t.Helper()
	cl, err := kgo.NewClient(append(brokers(c), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	recs := make([]*kgo.Record, len(keys))
	for i, k := range keys {
		recs[i] = &kgo.Record{Topic: topic, Partition: p, Key: []byte(k), Value: []byte(k)}
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// distinctKeys returns n keys named prefix-0, prefix-1, ...
func distinctKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = prefix + "-" + strconv.Itoa(i)
	}
	return keys
}

// counterValue sums the samples of the counter family name in reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.Metric {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// A plugin that acknowledges twice (an explicit call and a deferred one), or
// calls the Ack of a message it was given earlier, must not complete
// another record: the job that carried the earlier message is reused.
func TestExtraAcksAreIgnored(t *testing.T) {
	const records, keys = 3000, 40
	h := newHarness(t, 4)
	produce(t, h.c, testTopic, records, keys)
	var (
		mu      sync.Mutex // guards handled and prev
		handled = map[at]int{}
		prev    handler.Ack
		total   atomic.Int64
	)
	hd := handlerFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
		mu.Lock()
		handled[at{m.Partition, m.Offset}]++
		stale := prev
		prev = ack
		mu.Unlock()
		total.Add(1)
		defer ack.Done(nil) // a second acknowledgement
		ack.Done(nil)
		stale.Done(nil) // the Ack of an earlier message, long acknowledged
	})
	r := h.receiver("g-extra-acks", hd, 64)
	testwait.For(t, 30*time.Second, "every record finished", func() bool { return h.committedAtEnd("g-extra-acks") })
	stop(t, r)
	if n := r.InFlight(); n != 0 {
		t.Fatalf("%d records in flight after every record finished: the window counters drifted", n)
	}
	mu.Lock()
	defer mu.Unlock()
	_, end := h.offsets("g-extra-acks")
	for p, e := range end {
		for o := range e {
			if n := handled[at{p, o}]; n != 1 {
				t.Fatalf("partition %d offset %d handled %d times, want once", p, o, n)
			}
		}
	}
}

// The Ack of a failed attempt, called again while the retry runs, is not the
// retry's outcome.
func TestAckOfAnEarlierAttemptIsIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		produce(t, h.c, testTopic, 3, 3)
		acks := make(chan handler.Ack, 2)
		var calls atomic.Int64
		hd := handlerFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
			if m.Offset != 0 {
				ack.Done(nil)
				return
			}
			if calls.Add(1) == 1 {
				ack.Done(handler.Classed(handler.Transient, errors.New("503")))
			}
			acks <- ack // the retry is answered by the test
		})
		r := h.receiver("g-late-attempt", hd, 16, func(o *Options) {
			o.DeadLetter.Enabled = false // held and retried
			o.RetryBackoff = 200 * time.Millisecond
		})
		first, second := <-acks, <-acks
		first.Done(nil) // late, and of the failed attempt
		time.Sleep(300 * time.Millisecond)
		if committed, _ := h.offsets("g-late-attempt"); committed[0] > 0 {
			t.Fatalf("committed %d while the retry of offset 0 was unanswered: the first attempt's Ack was taken as its outcome", committed[0])
		}
		second.Done(nil)
		testwait.For(t, 10*time.Second, "every record finished", func() bool { return h.committedAtEnd("g-late-attempt") })
		stop(t, r)
	})
}

// A stop whose deadline passes with a record unfinished still commits what
// finished before it, and everything of the other partitions.
func TestStopCommitsWhatFinishedWhenSomethingIsUnfinished(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 2)
		produceAt(t, h.c, testTopic, 0, distinctKeys("a", 10)...)
		produceAt(t, h.c, testTopic, 1, distinctKeys("b", 10)...)
		var handled atomic.Int64
		hung := make(chan handler.Ack, 1)
		hd := handlerFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
			if m.Partition == 0 && m.Offset == 5 {
				hung <- ack // not answered before the stop, not even on cancellation
				return
			}
			handled.Add(1)
			ack.Done(nil)
		})
		r := h.receiver("g-stop-commit", hd, 64, func(o *Options) { o.CommitInterval = time.Hour })
		testwait.For(t, 10*time.Second, "the other 19 records handled", func() bool { return handled.Load() == 19 })
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		if err := r.Stop(ctx); err == nil || !strings.Contains(err.Error(), "1 records unfinished") {
			t.Fatalf("Stop: %v, want the unfinished record reported", err)
		}
		committed, _ := h.offsets("g-stop-commit")
		if committed[0] != 5 || committed[1] != 10 {
			t.Fatalf("committed %v, want partition 0 at 5 (its unfinished record) and partition 1 at 10", committed)
		}
		(<-hung).Done(nil) // lets the executor close
	})
}

// A span pause lifted by a completion that races the partition's loss must
// not stay on the partition in the client once it is assigned back.
func TestPauseEndsWithItsAssignment(t *testing.T) {
	const records = 60
	h := newHarness(t, 1)
	head := make(chan handler.Ack, 1)
	var mu sync.Mutex
	handled := map[int64]bool{}
	hd := handlerFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
		mu.Lock()
		handled[m.Offset] = true
		mu.Unlock()
		if m.Offset == 0 {
			head <- ack // the head holds the commit while the others finish
			return
		}
		ack.Done(nil)
	})
	r := h.receiver("g-pause-reassign", hd, 4) // span cap 16
	// The polls are driven by hand: kgo runs no rebalance callback between
	// a poll and AllowRebalance, which a poll loop racing the hand-made loss
	// below would not respect.
	stop(t, r)
	r.stopping.Store(false)
	r.closing.Store(false)
	owned := map[string][]int32{testTopic: {0}}
	r.onAssigned(context.Background(), r.cl, owned)
	fetch := func(from, to int64) kgo.FetchTopicPartition {
		fp := kgo.FetchTopicPartition{Topic: testTopic, FetchPartition: kgo.FetchPartition{Partition: 0, HighWatermark: records}}
		for o := from; o < to; o++ {
			fp.Records = append(fp.Records, &kgo.Record{Topic: testTopic, Partition: 0, Offset: o, Key: []byte("k" + strconv.FormatInt(o, 10))})
		}
		return fp
	}
	done := func(n int) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(handled) == n
		}
	}
	r.admitPartition(fetch(0, 20))
	testwait.For(t, 10*time.Second, "all but the head handled", done(20))
	if paused := r.cl.PauseFetchPartitions(nil); len(paused[testTopic]) != 1 {
		t.Fatalf("the span of 20 records did not pause the partition in the client: %v", paused)
	}
	var once sync.Once
	hook := func(r *Receiver, p *partition, lifted bool) {
		if !lifted {
			return
		}
		once.Do(func() {
			// The partition is lost and assigned back right after the
			// completion lifted its pause, before anything else happened.
			r.onLost(context.Background(), r.cl, owned)
			r.onAssigned(context.Background(), r.cl, owned)
		})
	}
	testHookDone.Store(&hook)
	t.Cleanup(func() { testHookDone.Store(nil) })
	(<-head).Done(nil)
	testwait.For(t, 10*time.Second, "the loss and the new assignment", func() bool {
		r.partsMu.RLock()
		defer r.partsMu.RUnlock()
		p := r.parts[tp{testTopic, 0}]
		return p != nil && p.first < 0 && r.inFlight.Load() == 0
	})
	if paused := r.cl.PauseFetchPartitions(nil); len(paused) > 0 {
		t.Fatalf("partitions still paused in the client after the new assignment: %v", paused)
	}
	// The new incarnation takes the rest (kgo resumes it at the commit).
	r.admitPartition(fetch(20, records))
	testwait.For(t, 10*time.Second, "every record handled by the new incarnation", done(records))
	if paused := r.cl.PauseFetchPartitions(nil); len(paused) > 0 {
		t.Fatalf("partitions paused in the client with nothing unfinished: %v", paused)
	}
}

// A panic in a handler fails its message permanently (dead-lettered with
// class panic), and wowd keeps running: also when the panic happens in a
// retry that handler.WithRetry makes from a timer's goroutine.
func TestPanicFailsTheMessageNotTheProcess(t *testing.T) {
	for _, name := range []string{"in Handle", "in a WithRetry retry"} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, 1)
			produce(t, h.c, testTopic, 10, 10)
			var handled atomic.Int64
			var inner handler.Handler = handler.Sync(func(_ context.Context, m *handler.Message) error {
				if m.Offset == 3 {
					panic("boom at offset 3")
				}
				handled.Add(1)
				return nil
			})
			if name == "in a WithRetry retry" {
				var tries atomic.Int64
				first := inner
				inner = handler.WithRetry(handlerFunc(func(ctx context.Context, m *handler.Message, ack handler.Ack) {
					if m.Offset == 3 && tries.Add(1) == 1 {
						ack.Done(errors.New("first try fails transiently"))
						return
					}
					first.Handle(ctx, m, ack)
				}), handler.RetryPolicy{MaxAttempts: 3, Initial: 10 * time.Millisecond})
			}
			m := metrics.New("test")
			r := h.receiver("g-panic", inner, 16, func(o *Options) { o.Metrics = m })
			testwait.For(t, 10*time.Second, "every record finished", func() bool { return h.committedAtEnd("g-panic") })
			stop(t, r)
			dl := dlqRecords(t, h.c, testTopic+".dlq", 1)
			if len(dl) != 1 || header(dl[0], HeaderErrorClass) != "panic" || header(dl[0], HeaderSourceOffset) != "3" ||
				!strings.Contains(header(dl[0], HeaderErrorMessage), "boom at offset 3") {
				t.Fatalf("dead letters %d, want offset 3 with class panic", len(dl))
			}
			if handled.Load() != 9 {
				t.Fatalf("handled %d, want 9", handled.Load())
			}
			if n := counterValue(t, m.Registry, "wowd_handler_panics_total"); n != 1 {
				t.Fatalf("wowd_handler_panics_total %v, want 1", n)
			}
		})
	}
}

// A handler that never acknowledges fails its try at the deadline (a
// transient failure: here dead-lettered, as nothing else failed); its late
// acknowledgement is ignored. A try that reports a retry gets a new
// deadline after the retry's wait.
func TestHandlerTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		produce(t, h.c, testTopic, 6, 6)
		late := make(chan handler.Ack, 1)
		var rcv atomic.Pointer[Receiver]
		var handled atomic.Int64
		hd := handlerFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
			switch m.Offset {
			case 2:
				late <- ack // never answered in time
			case 4:
				// A try that takes 1.5 timeouts, but reports a retry after one
				// half and answers within the next: no deadline passes.
				go func() {
					time.Sleep(150 * time.Millisecond)
					rcv.Load().Retrying(m, 1, errors.New("503"), 100*time.Millisecond)
					time.Sleep(300 * time.Millisecond)
					handled.Add(1)
					ack.Done(nil)
				}()
			default:
				handled.Add(1)
				ack.Done(nil)
			}
		})
		m := metrics.New("test")
		r := h.receiver("g-timeout", hd, 16, func(o *Options) {
			o.HandlerTimeout = 300 * time.Millisecond
			o.Metrics = m
		})
		rcv.Store(r)
		testwait.For(t, 10*time.Second, "every record finished", func() bool { return h.committedAtEnd("g-timeout") })
		(<-late).Done(nil) // too late: ignored
		stop(t, r)
		if n := r.InFlight(); n != 0 {
			t.Fatalf("%d records in flight after the late acknowledgement", n)
		}
		dl := dlqRecords(t, h.c, testTopic+".dlq", 1)
		if len(dl) != 1 || header(dl[0], HeaderSourceOffset) != "2" || header(dl[0], HeaderErrorClass) != "transient" ||
			!strings.Contains(header(dl[0], HeaderErrorMessage), "did not acknowledge in time") {
			t.Fatalf("%d dead letters, want offset 2 failed by its deadline", len(dl))
		}
		if handled.Load() != 5 {
			t.Fatalf("handled %d, want 5 (offset 4's try reported a retry in time)", handled.Load())
		}
		if n := counterValue(t, m.Registry, "wowd_handler_timeouts_total"); n != 1 {
			t.Fatalf("wowd_handler_timeouts_total %v, want 1", n)
		}
	})
}

// Readiness follows the group membership: a member that lost it is not
// ready until it joined again.
func TestReadinessFollowsMembership(t *testing.T) {
	h := newHarness(t, 2)
	r := h.receiver("g-ready", newRecorder(), 16)
	testwait.For(t, 10*time.Second, "ready", r.Ready)
	// The next heartbeat says the member is gone, and joining again fails
	// until the fault is removed.
	join := h.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.JoinGroup}, Err: kerr.CoordinatorNotAvailable, TopLevel: true, Count: -1})
	h.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Heartbeat}, Err: kerr.UnknownMemberID, TopLevel: true})
	testwait.For(t, 10*time.Second, "not ready after losing the membership", func() bool { return !r.Ready() })
	join.Remove()
	testwait.For(t, 30*time.Second, "ready again after joining", r.Ready)
	stop(t, r)
}

// An aggregate whose first record is stuck, with a backlog behind it, holds
// its partition at its share of the window (the rest of the partition's
// records wait in the receiver); the other partitions keep being handled.
func TestStuckAggregateHoldsOnlyItsPartition(t *testing.T) {
	const window = 32
	h := newHarness(t, 4)
	var hot []string
	for i := range 200 {
		if i%2 == 0 {
			hot = append(hot, "hot") // half of the partition's traffic
		} else {
			hot = append(hot, "cold-"+strconv.Itoa(i))
		}
	}
	produceAt(t, h.c, testTopic, 0, hot...)
	stuck := make(chan handler.Ack, 1)
	var others atomic.Int64
	hd := handlerFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
		switch {
		case m.Partition == 0 && m.Offset == 0:
			stuck <- ack
		case m.Partition != 0:
			others.Add(1)
			ack.Done(nil)
		default:
			ack.Done(nil)
		}
	})
	r := h.receiver("g-stuck-hot", hd, window)
	ack := <-stuck
	share, batch := int64(window/2), int64(window/16) // its records go in a batch at a time
	stuckAtShare := func() bool {
		for _, p := range r.Partitions() {
			if p.Partition == 0 {
				return p.Unfinished > share-batch && p.Unfinished <= share && p.Waiting > 0
			}
		}
		return false
	}
	testwait.For(t, 10*time.Second, "the hot aggregate's partition at its share, the rest waiting", stuckAtShare)
	for p := int32(1); p < 4; p++ {
		produceAt(t, h.c, testTopic, p, distinctKeys("p"+strconv.Itoa(int(p)), 100)...)
	}
	testwait.For(t, 20*time.Second, "the other partitions handled while the aggregate is stuck", func() bool {
		return others.Load() == 300
	})
	if s := r.Snapshot(); s.Paused || !stuckAtShare() {
		t.Fatalf("receiver paused %v, partitions %+v: want only the stuck partition held, at its share", s.Paused, r.Partitions())
	}
	ack.Done(nil)
	testwait.For(t, 20*time.Second, "every record finished", func() bool { return h.committedAtEnd("g-stuck-hot") })
	stop(t, r)
}

// When the client rewinds a partition (the broker reported records it had
// read as lost and the client reset it), the receiver starts a new
// incarnation from the reset offset: the old one is closed, so its
// finished prefix is never committed after the rewind (it may not describe
// what the log holds now), its unfinished records are dropped, and
// everything from the reset offset is delivered again. The poll is driven
// by hand: kfake cannot truncate a log.
func TestRewoundPartitionStartsOver(t *testing.T) {
	h := newHarness(t, 1)
	var mu sync.Mutex
	var seen []int64
	held := make(chan handler.Ack, 10)
	hd := handlerFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
		mu.Lock()
		seen = append(seen, m.Offset)
		mu.Unlock()
		if m.Offset == 3 {
			held <- ack // unfinished when the rewind comes
			return
		}
		ack.Done(nil)
	})
	m := metrics.New("test")
	r := h.receiver("g-rewind", hd, 64, func(o *Options) { o.Metrics = m })
	stop(t, r) // the hand-driven polls below need the poll loop out of the way
	r.stopping.Store(false)
	r.closing.Store(false)
	assigned := map[string][]int32{testTopic: {0}}
	r.onAssigned(context.Background(), r.cl, assigned)
	r.admitPartition(partitionFetch(0, 10, ownKey))
	testwait.For(t, 5*time.Second, "the first pass", func() bool { return r.InFlight() == 1 })
	old := r.parts[tp{testTopic, 0}]
	if wm, _, _ := old.tr.watermark(); wm != 3 {
		t.Fatalf("watermark %d before the rewind, want 3", wm)
	}
	r.admitPartition(partitionFetch(0, 10, ownKey)) // the client went back to 0
	if !old.isClosed() || r.parts[tp{testTopic, 0}] == old {
		t.Fatal("the rewind did not start a new incarnation")
	}
	(<-held).Done(nil) // the old incarnation's record: its completion changes nothing now
	(<-held).Done(nil)
	testwait.For(t, 5*time.Second, "the second pass", func() bool { return r.InFlight() == 0 })
	np := r.parts[tp{testTopic, 0}]
	if wm, _, _ := np.tr.watermark(); wm != 10 {
		t.Fatalf("watermark %d after the second pass, want 10", wm)
	}
	if wm, _, _ := old.tr.watermark(); wm != 3 {
		t.Fatalf("the closed incarnation's watermark moved to %d", wm)
	}
	if n := counterValue(t, m.Registry, "wowd_receiver_rewinds_total"); n != 1 {
		t.Fatalf("wowd_receiver_rewinds_total %v, want 1", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 20 {
		t.Fatalf("%d deliveries, want every record twice: %v", len(seen), seen)
	}
	r.closePartition(np)
}

// rewindReceiver builds a receiver of window 64, polled by hand, owning
// partition 0, whose handler holds the first try of offset 3 (sent to held)
// and acknowledges everything else at once; seen tells how many tries an
// offset got.
func rewindReceiver(t *testing.T, group string, extra ...func(*Options)) (r *Receiver, held <-chan handler.Ack, seen func(int64) int) {
	h := newHarness(t, 1)
	var mu sync.Mutex
	tries := map[int64]int{}
	hold := make(chan handler.Ack, 10)
	hd := handlerFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
		mu.Lock()
		tries[m.Offset]++
		first := tries[m.Offset] == 1
		mu.Unlock()
		if m.Offset == 3 && first {
			hold <- ack
			return
		}
		ack.Done(nil)
	})
	r = h.receiver(group, hd, 64, extra...)
	stop(t, r) // the polls are driven by hand
	r.stopping.Store(false)
	r.closing.Store(false)
	r.onAssigned(context.Background(), r.cl, map[string][]int32{testTopic: {0}})
	return r, hold, func(o int64) int {
		mu.Lock()
		defer mu.Unlock()
		return tries[o]
	}
}

// partitionFetch is a hand-made fetch of partition 0: offsets from to to,
// keyed by key.
func partitionFetch(from, to int64, key func(o int64) string) kgo.FetchTopicPartition {
	fp := kgo.FetchTopicPartition{Topic: testTopic, FetchPartition: kgo.FetchPartition{Partition: 0, HighWatermark: to}}
	for o := from; o < to; o++ {
		fp.Records = append(fp.Records, &kgo.Record{Topic: testTopic, Partition: 0, Offset: o, Key: []byte(key(o))})
	}
	return fp
}

// ownKey gives each offset an aggregate of its own.
func ownKey(o int64) string { return "k" + strconv.FormatInt(o, 10) }

// A client that resumes above a record the old incarnation left
// unfinished (the log diverged at 6 while 3 was still in its handler) is
// sent back to that record: nothing the old incarnation did not finish is
// skipped. Found by review: the first version of the rewind committed past
// 3 and 4.
func TestRewindAboveAnUnfinishedRecordGoesBack(t *testing.T) {
	r, held, seen := rewindReceiver(t, "g-rewind-back")
	key := func(o int64) string {
		if o == 4 {
			return "k3" // queued behind the held record of its aggregate
		}
		return ownKey(o)
	}
	r.admitPartition(partitionFetch(0, 10, key))
	testwait.For(t, 5*time.Second, "the first pass", func() bool { return r.InFlight() == 2 })
	old := r.parts[tp{testTopic, 0}]
	old.member = "m-1"
	r.admitPartition(partitionFetch(6, 10, key)) // the client resumed at 6
	np := r.parts[tp{testTopic, 0}]
	if np == old || !old.isClosed() {
		t.Fatal("the rewind did not start a new incarnation")
	}
	if np.member != old.member {
		// Else it is stale (see Receiver.stale) and writes no parking
		// state until the next assignment: the simulation's seed 7 stalled
		// a partition so.
		t.Errorf("the new incarnation is of member %q, want the same membership's %q", np.member, old.member)
	}
	if n := np.tr.span(); n != 0 {
		t.Fatalf("%d records of the fetch above the unfinished record were admitted", n)
	}
	(<-held).Done(nil)                           // the old try ends: changes nothing now
	r.admitPartition(partitionFetch(3, 10, key)) // the client, sent back, fetches from 3
	testwait.For(t, 5*time.Second, "the second pass", func() bool { return r.InFlight() == 0 })
	if wm, _, _ := np.tr.watermark(); wm != 10 {
		t.Fatalf("watermark %d, want 10", wm)
	}
	if seen(4) == 0 {
		t.Error("offset 4, dropped with the old incarnation, was never handled")
	}
	if n := seen(3); n != 2 {
		t.Errorf("offset 3 handled %d times, want again after the rewind", n)
	}
	r.closePartition(np)
}

// The client sent back to an unfinished record goes with that record's
// leader epoch, not without one (-1): it then checks the log against it, as
// after any fetch, and finds a divergence below that record too instead of
// reading whatever the log holds at its offset by then.
func TestRewindBackGoesWithTheRecordsEpoch(t *testing.T) {
	r, held, _ := rewindReceiver(t, "g-rewind-epoch")
	var sent []map[string]map[int32]kgo.EpochOffset
	r.seek = func(to map[string]map[int32]kgo.EpochOffset) { sent = append(sent, to) } // the poll loop is this goroutine
	epochOf := func(fp kgo.FetchTopicPartition, epoch func(o int64) int32) kgo.FetchTopicPartition {
		for _, rec := range fp.Records {
			rec.LeaderEpoch = epoch(rec.Offset)
		}
		return fp
	}
	r.admitPartition(epochOf(partitionFetch(0, 10, ownKey), func(o int64) int32 { return int32(o / 2) })) // 3 is of epoch 1
	testwait.For(t, 5*time.Second, "the first pass", func() bool { return r.InFlight() == 1 })
	r.admitPartition(epochOf(partitionFetch(6, 10, ownKey), func(int64) int32 { return 7 })) // the log diverged at 6 while 3 is unfinished
	want := kgo.EpochOffset{Epoch: 1, Offset: 3}
	if len(sent) != 1 || sent[0][testTopic][0] != want {
		t.Errorf("the client was sent to %v, want once to partition 0 at %+v", sent, want)
	}
	(<-held).Done(nil)
	r.closePartition(r.parts[tp{testTopic, 0}])
}

// A poll that brings a partition twice (fetches of two brokers buffered
// across a leader move) and sends the client back on the first: the second
// is not admitted either, into the new incarnation, above the records the
// client goes back to; else finishing it could commit past them.
func TestRewindBackSkipsTheRestOfThePoll(t *testing.T) {
	r, held, _ := rewindReceiver(t, "g-rewind-poll")
	r.admitPartition(partitionFetch(0, 10, ownKey))
	testwait.For(t, 5*time.Second, "the first pass", func() bool { return r.InFlight() == 1 })
	old := r.parts[tp{testTopic, 0}]
	// The log diverged at 6 while 3 is unfinished.
	r.pollRound(partitionFetch(6, 10, ownKey), partitionFetch(10, 14, ownKey))
	np := r.parts[tp{testTopic, 0}]
	if np == old || !old.isClosed() {
		t.Fatal("the rewind did not start a new incarnation")
	}
	if n := np.tr.span(); n != 0 {
		t.Fatalf("%d records admitted into the new incarnation before the client came back to 3", n)
	}
	if n := r.InFlight(); n != 1 {
		t.Fatalf("%d window slots taken after the round, want 1 (the old incarnation's try of 3)", n)
	}
	(<-held).Done(nil)
	r.admitPartition(partitionFetch(3, 14, ownKey)) // the client, sent back, fetches from 3
	testwait.For(t, 5*time.Second, "the second pass", func() bool { return r.InFlight() == 0 })
	if wm, _, _ := np.tr.watermark(); wm != 14 {
		t.Fatalf("watermark %d, want 14", wm)
	}
	r.closePartition(np)
}
