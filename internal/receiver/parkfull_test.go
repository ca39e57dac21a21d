package receiver

// Regression tests of the defects a review of parking found in max-parked's
// pause, parking by hand and actions across a partition's incarnations;
// each failed before its fix.

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/kfaketest"
	"github.com/wowd/wowd/internal/park"
	"github.com/wowd/wowd/internal/testwait"
)

// part0 returns r's incarnation of partition 0.
func part0(r *Receiver) *partition {
	r.partsMu.RLock()
	defer r.partsMu.RUnlock()
	return r.parts[tp{testTopic, 0}]
}

// loadedAgain waits until partition 0 of r is an incarnation other than
// old, loaded.
func loadedAgain(t *testing.T, r *Receiver, old *partition) *partition {
	t.Helper()
	var np *partition
	testwait.For(t, 30*time.Second, "partition 0 taken again and loaded", func() bool {
		r.partsMu.RLock()
		defer r.partsMu.RUnlock()
		np = r.parts[tp{testTopic, 0}]
		return np != nil && np != old && np.parkEpoch.Load() != 0
	})
	return np
}

// The max-parked pause ends when the message that waited for room goes
// without parking: with max-parked 1, A parked on partition 0 and B,
// failing for good on partition 1, waiting for room, partition 1 is lost.
// B's job is given up holding no slot and nothing of partition 1 was
// parked: counted by parked aggregates and slots alone, the receiver stayed
// full and kept every topic paused until an operator unparked A, though no
// message waited to park.
func TestMaxParkedPauseEndsWithTheMessageWaitingForRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const group = "g-park-full-lost"
		h := newVirtualHarness(t, 2)
		var mu sync.Mutex
		handled := map[string]int{}
		hd := handler.Sync(func(_ context.Context, m *handler.Message) error {
			if m.AggregateID == "A" || m.AggregateID == "B" {
				return handler.Classed(handler.Permanent, errors.New("rejected"))
			}
			mu.Lock()
			handled[m.AggregateID]++
			mu.Unlock()
			return nil
		})
		r := h.receiver(group, hd, 16, func(o *Options) { o.Park = &Parking{StateTopic: testStateTopic, Max: 1} })
		produceAt(t, h.c, testTopic, 0, "A")
		testwait.For(t, 30*time.Second, "A parked", func() bool { return h.parkedState("A") != nil })
		produceAt(t, h.c, testTopic, 1, "B")
		testwait.For(t, 30*time.Second, "B waiting for room", func() bool { return r.Snapshot().ParkFull })
		if n := r.Snapshot().ParkWaiting; n != 1 {
			t.Errorf("%d messages reported waiting to park, want 1 (B)", n)
		}
		handledC := func() bool {
			mu.Lock()
			defer mu.Unlock()
			return handled["C"] == 1
		}
		// A poll under way when B found no room still returns what comes
		// (W): the poll loop pauses after it.
		produceAt(t, h.c, testTopic, 0, "W")
		time.Sleep(time.Second)
		produceAt(t, h.c, testTopic, 0, "C")
		time.Sleep(5 * time.Second)
		if handledC() {
			t.Fatal("C handled while B waited for room")
		}

		// Partition 1 is lost (as onLost does it).
		r.commitMu.lock()
		gone := r.take(map[string][]int32{testTopic: {1}})
		for _, p := range gone {
			r.closePartition(p)
		}
		r.unloadParked(gone)
		r.commitMu.unlock()

		testwait.For(t, 30*time.Second, "C, on partition 0, handled", handledC)
		if s := r.Snapshot(); s.ParkFull || s.ParkWaiting != 0 {
			t.Errorf("reported full %v with %d messages waiting to park, want neither (B's partition is gone)", s.ParkFull, s.ParkWaiting)
		}
		stop(t, r)
	})
}

// A job that found no max-parked slot pauses fetching only if there is
// still none once it is counted as waiting: an unpark whose check of the
// room came between the two (and saw no job waiting) must not leave the
// pause on. Nor does the pause outlast the last job waiting.
func TestMaxParkedPauseAndAnUnparkMeanwhile(t *testing.T) {
	r := &Receiver{park: &parkState{}, log: zap.NewNop(), o: Options{Park: &Parking{Max: 1}}}
	r.nparked.Store(1)
	j := &job{jobState: jobState{r: r}}
	if j.reservePark() {
		t.Fatal("a slot reserved past max-parked")
	}
	r.nparked.Store(0) // unparked
	r.parkRoom()
	if j.waitPark() || r.parkFull.Load() {
		t.Fatal("fetching paused with room for the job")
	}
	r.nparked.Store(1) // another aggregate took the room
	if !j.waitPark() || !r.parkFull.Load() || r.parkWaiting.Load() != 1 {
		t.Fatalf("not paused with no room and a job waiting (waiting: %d)", r.parkWaiting.Load())
	}
	j.releasePark() // the job is given up
	if r.parkFull.Load() || r.parkWaiting.Load() != 0 {
		t.Fatalf("paused with no job waiting (waiting: %d)", r.parkWaiting.Load())
	}
}

// A request to park an aggregate by hand whose action never ran, its
// partition lost first, is carried out once the partition comes back to
// this member. The mark that the aggregate was being parked by hand was
// cleared only by the action itself: left by the incarnation that ended,
// it made the next ignore the request for the rest of the process's life.
// Here the action is held at its start (every action slot taken) until
// the partition is lost.
func TestParkByHandCutShortIsCarriedOutWhenThePartitionComesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const group = "g-park-hand-lost"
		h := newVirtualHarness(t, 1)
		produce(t, h.c, testTopic, 3, 1) // agg-0: #0..#2
		sink := newParkSink(func(string, uint64) bool { return false })
		r := h.receiver(group, sink, 16, parking)
		testwait.For(t, 30*time.Second, "every record finished", func() bool { return h.committedAtEnd(group) })
		for range maxActions {
			r.park.actions <- struct{}{}
		}
		if n, err := r.ParkByHand(context.Background(), "agg-0", "test"); err != nil || n != 1 {
			t.Fatalf("ParkByHand: %d, %v", n, err)
		}
		k := parkKey{testTopic, "agg-0"}
		testwait.For(t, 30*time.Second, "the park action queued", func() bool {
			r.park.mu.RLock()
			defer r.park.mu.RUnlock()
			_, queued := r.park.handParking[k]
			return queued
		})
		old := part0(r)
		r.member = "a member ID the coordinator dropped"
		r.cl.ForceRebalance()
		loadedAgain(t, r, old)
		for range maxActions {
			<-r.park.actions
		}
		testwait.For(t, 30*time.Second, "agg-0 parked by hand", func() bool {
			st := h.parkedState("agg-0")
			return st != nil && st.Class == "by-hand" && st.Request == nil
		})
		stop(t, r)
	})
}

// An action of an incarnation that ended completes without touching the
// parked aggregate of the incarnation that took the partition again: a
// skip whose redriven message is still in the handler when its partition
// is lost and comes back to this member, where the skip is asked again
// (the request is still pending), must not make the new incarnation's
// entry take the request up a second time once it is cut short. Done
// twice, the second skip dead-lettered the message at which the first
// failed again (its new head), which no one asked to skip, and redrove
// the rest.
func TestAnEndedIncarnationsActionLeavesTheNewOnesAggregate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const group = "g-park-old-action"
		h := newVirtualHarness(t, 1)
		produce(t, h.c, testTopic, 10, 1) // agg-0: #0..#9
		var phase atomic.Int32            // 0: #3 fails; 1: #4 hangs once; 2: #5 fails
		inHandler, release := make(chan struct{}), make(chan struct{})
		var hung atomic.Bool
		sink := newParkSink(func(string, uint64) bool { return false })
		hd := handlerFunc(func(ctx context.Context, m *handler.Message, ack handler.Ack) {
			seq := binary.BigEndian.Uint64(m.Value)
			switch ph := phase.Load(); {
			case ph == 0 && seq == 3, ph == 2 && seq == 5:
				ack.Done(handler.Classed(handler.Permanent, context.Canceled))
				return
			case ph == 1 && seq == 4 && hung.CompareAndSwap(false, true):
				close(inHandler)
				<-release // ignores its context: returns after the partition came back
			}
			sink.Handle(ctx, m, ack)
		})
		r := h.receiver(group, hd, 16, parking)
		testwait.For(t, 30*time.Second, "agg-0 parked at #3 and committed", func() bool {
			return h.committedAtEnd(group) && h.parkedState("agg-0") != nil
		})
		phase.Store(1)
		h.ask("agg-0", park.Skip)
		<-inHandler // the skip dead-lettered #3 and hands #4 over
		old := part0(r)

		// The partition is lost and comes back to this member (the loss as
		// in TestRetakeAfterTheCoordinatorDroppedTheMember), where the
		// skip, still pending, is queued behind the old one.
		r.member = "a member ID the coordinator dropped"
		r.cl.ForceRebalance()
		loadedAgain(t, r, old)
		testwait.For(t, 10*time.Second, "the skip queued again", func() bool {
			r.park.mu.RLock()
			defer r.park.mu.RUnlock()
			a := r.park.parked[parkKey{testTopic, "agg-0"}]
			return a != nil && a.busy
		})
		phase.Store(2)
		close(release) // the old skip is cut short; the new one dead-letters #3 again, hands #4 over and fails at #5

		testwait.For(t, 30*time.Second, "the skip answered", func() bool {
			st := h.parkedState("agg-0")
			return st == nil || st.Request == nil
		})
		time.Sleep(10 * time.Second) // room for a second run
		dead := deadSeqs(t, h.c)
		if slices.Contains(dead, 5) {
			t.Errorf("dead letters %v: #5, the new head after the skip failed again, was skipped too", dead)
		}
		if st := h.parkedState("agg-0"); st == nil || st.Offset != 5 {
			t.Errorf("agg-0's parked state %+v, want parked at #5", st)
		}
		if got := sink.of("agg-0"); slices.Contains(got, 6) {
			t.Errorf("agg-0 handled %v: past #5, which failed again", got)
		}
		stop(t, r)
	})
}

// An action whose request was answered before its turn came (the request
// is no longer pending) does nothing: it only lets the aggregate take the
// next request. Here dead letters are disabled, so a skip that went on
// would refuse, logging an error.
func TestAnActionOfAnAnsweredRequestDoesNothing(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	ps := &parkState{parked: make(map[parkKey]*parkedAgg), loaded: make(map[tp]bool), book: park.NewBook(), handParking: make(map[parkKey]*partition)}
	r := &Receiver{park: ps, parts: make(map[tp]*partition), log: zap.New(core)}
	k := parkKey{testTopic, "agg-0"}
	a := &parkedAgg{state: park.State{Topic: testTopic, Aggregate: "agg-0"}, busy: true, lastReq: "r1"}
	ps.parked[k] = a
	act := &parkAction{r: r, p: newPartition(testTopic, 0), k: k, a: a, req: park.Request{Action: park.Skip, ID: "r1"}}
	act.run()
	if n := logs.FilterLevelExact(zap.ErrorLevel).Len(); n > 0 {
		t.Fatalf("the action went on: %v", logs.FilterLevelExact(zap.ErrorLevel).All()[0].Message)
	}
	if a.busy {
		t.Fatal("the aggregate's entry still busy")
	}
}

// An action queued (here waiting for an action slot) when its partition is
// rewound is carried out by the incarnation that takes the partition's
// place: the same ownership keeps the aggregate's entry, and no load looks
// at the request again. The action ended without acting and left the
// entry saying it had taken the request up (lastReq), so the request
// stayed pending, ignored, until the process restarted.
func TestAnActionQueuedAcrossARewindIsCarriedOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const group = "g-park-rewind-queued"
		h := newVirtualHarness(t, 1)
		produce(t, h.c, testTopic, 5, 1) // agg-0 #0..#4
		var broken atomic.Bool
		broken.Store(true)
		sink := newParkSink(func(_ string, seq uint64) bool { return broken.Load() && seq == 2 })
		r := h.receiver(group, sink, 16, parking)
		testwait.For(t, 30*time.Second, "agg-0 parked", func() bool {
			return h.committedAtEnd(group) && h.parkedState("agg-0") != nil
		})
		broken.Store(false)
		for range maxActions {
			r.park.actions <- struct{}{} // every action slot taken: the redrive waits for one
		}
		h.ask("agg-0", park.Redrive)
		k := parkKey{testTopic, "agg-0"}
		testwait.For(t, 30*time.Second, "the redrive queued", func() bool {
			r.park.mu.RLock()
			defer r.park.mu.RUnlock()
			a := r.park.parked[k]
			return a != nil && a.busy
		})
		rewindPart0(r)
		for range maxActions {
			<-r.park.actions
		}
		testwait.For(t, 60*time.Second, "agg-0 redriven after the rewind", func() bool {
			return h.parkedState("agg-0") == nil
		})
		if got, want := sink.of("agg-0"), seqs(0, 5); !slices.Equal(got, want) {
			t.Errorf("agg-0 handled %v, want %v", got, want)
		}
		stop(t, r)
	})
}

// An action that finds its partition closed when its turn comes (the
// slot-waiting case is TestAnActionQueuedAcrossARewindIsCarriedOut) does
// nothing, and leaves its entry free to take the request up again, still
// pending: the entry is the aggregate's still if the partition was rewound.
func TestAnActionOfAClosedPartitionLeavesItsRequestToBeTakenUpAgain(t *testing.T) {
	ps := &parkState{parked: make(map[parkKey]*parkedAgg), loaded: make(map[tp]bool), book: park.NewBook(), handParking: make(map[parkKey]*partition)}
	r := &Receiver{park: ps, parts: make(map[tp]*partition), log: zap.NewNop()}
	k := parkKey{testTopic, "agg-0"}
	a := &parkedAgg{state: park.State{Topic: testTopic, Aggregate: "agg-0"}, busy: true, lastReq: "r1"}
	ps.parked[k] = a
	req := park.Request{Action: park.Redrive, ID: "r1"}
	if err := ps.book.Apply(park.RequestKey(testTopic, "agg-0", req.ID), &park.State{Topic: testTopic, Aggregate: "agg-0", Request: &req}); err != nil {
		t.Fatal(err)
	}
	p := newPartition(testTopic, 0)
	p.closed.Store(true)
	(&parkAction{r: r, p: p, k: k, a: a, req: req}).run()
	if a.busy || a.lastReq != "" {
		t.Fatalf("the entry after the action: busy %v, lastReq %q; want free, its request not taken up", a.busy, a.lastReq)
	}
}

// TestSkipOfAnAggregateParkedByHandDeadLettersNothing: an aggregate parked
// by hand has no message that failed; its head is the first message that
// came after the park. A skip dead-letters only a head that failed, so
// here it dead-letters nothing and hands every parked message over in
// order, like a redrive. (It dead-lettered the first message parked
// behind the park, which never failed.)
func TestSkipOfAnAggregateParkedByHandDeadLettersNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const group = "g-park-hand-skip"
		h := newVirtualHarness(t, 1)
		sink := newParkSink(func(string, uint64) bool { return false })
		r := h.receiver(group, sink, 16, parking)
		defer stop(t, r)
		testwait.For(t, 30*time.Second, "a member", func() bool { return r.Joined() })
		if n, err := r.ParkByHand(context.Background(), "agg-0", "test"); err != nil || n != 1 {
			t.Fatalf("parking by hand: %d, %v", n, err)
		}
		testwait.For(t, 30*time.Second, "agg-0 parked by hand", func() bool {
			st := h.parkedState("agg-0")
			return st != nil && st.Class == park.ClassByHand && st.Request == nil && r.Snapshot().ParkedAggregates == 1
		})
		produce(t, h.c, testTopic, 3, 1) // agg-0 #0..#2: parked behind the park
		testwait.For(t, 30*time.Second, "agg-0's messages parked", func() bool { return h.committedAtEnd(group) })
		if got := sink.of("agg-0"); len(got) != 0 {
			t.Fatalf("agg-0 handled %v while parked", got)
		}
		h.ask("agg-0", park.Skip)
		testwait.For(t, 30*time.Second, "agg-0 unparked", func() bool {
			return h.parkedState("agg-0") == nil && r.Snapshot().ParkedAggregates == 0
		})
		if got := sink.of("agg-0"); !slices.Equal(got, seqs(0, 3)) {
			t.Errorf("agg-0 handled %v, want %v", got, seqs(0, 3))
		}
		if dl := dlqRecords(t, h.c, testTopic+".dlq", 0); len(dl) != 0 {
			t.Errorf("%d dead letters, want none (no message of agg-0 failed)", len(dl))
		}
	})
}

// A park by hand with one of the receiver's topics listed with an error
// other than its absence (its leader moving) asks for nothing and says
// why. That topic was skipped, the others asked, and the admin API
// answered 202: the page said the aggregate would park while its messages
// went on being handled in that topic.
func TestParkByHandRefusesATopicItCannotList(t *testing.T) {
	const group = "g-park-hand-unlisted"
	h := newHarness(t, 1)
	produce(t, h.c, testTopic, 1, 1)
	r := h.receiver(group, newParkSink(func(string, uint64) bool { return false }), 16, parking)
	defer stop(t, r)
	testwait.For(t, 30*time.Second, "every record finished", func() bool { return h.committedAtEnd(group) })

	var leaderless atomic.Bool
	kfaketest.Leaderless(h.c, testTopic, func(*kmsg.MetadataRequest) bool { return leaderless.Load() })
	leaderless.Store(true)
	n, err := r.ParkByHand(context.Background(), "agg-0", "test")
	leaderless.Store(false)
	if n != 0 || !errors.Is(err, kerr.LeaderNotAvailable) || !strings.Contains(err.Error(), testTopic) {
		t.Fatalf("ParkByHand with %s's leader not available: %d, %v; want nothing asked and the error naming the topic", testTopic, n, err)
	}
	if st := h.parkedState("agg-0"); st != nil {
		t.Fatalf("agg-0 asked to park anyway: %+v", st)
	}
	// Once the topic lists again, the same call asks.
	if n, err := r.ParkByHand(context.Background(), "agg-0", "test"); n != 1 || err != nil {
		t.Fatalf("ParkByHand: %d, %v", n, err)
	}
}
