package receiver

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/park"
	"github.com/wowd/wowd/internal/testwait"
)

// rewindPart0 rewinds r's partition 0 at its last offset, as the poll loop
// does when the Kafka client resets it.
func rewindPart0(r *Receiver) {
	old := part0(r)
	old.mu.Lock()
	last := old.tr.last
	old.mu.Unlock()
	r.rewind(old, last, last, -1, 0)
}

// pauseAtLog returns a receiver option that holds the goroutine logging the
// first entry whose message is message: hit is closed then, and the
// goroutine goes on once release is closed.
func pauseAtLog(message string) (opt func(*Options), hit, release chan struct{}) {
	var fired atomic.Bool
	hit, release = make(chan struct{}), make(chan struct{})
	hook := func(e zapcore.Entry) error {
		if e.Message == message && !fired.Swap(true) {
			close(hit)
			<-release
		}
		return nil
	}
	return func(o *Options) { o.Logger = o.Logger.WithOptions(zap.Hooks(hook)) }, hit, release
}

// A skip finishes (the aggregate unparked, its state tombstone durable) and
// the partition is rewound before the skip's request is deleted. The
// rewound incarnation deletes the request; before, nothing looked at it
// again, the aggregate later parked on a new failure (#5), and when the
// partition moved the next owner took the old skip for a request on the
// new parking and dead-lettered #5, which no operator asked to skip (found
// by review).
func TestASkipsRequestLeftByARewindNeverMeetsALaterParking(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const group = "g-stale-skip-rewind"
		h := newVirtualHarness(t, 1)
		produce(t, h.c, testTopic, 5, 1) // agg-0 #0..#4
		var broken atomic.Bool
		broken.Store(true)
		sink := newParkSink(func(_ string, seq uint64) bool { return (broken.Load() && seq == 2) || seq == 5 })
		withHook, hit, release := pauseAtLog("parked aggregate: unparked")
		r := h.receiver(group, sink, 16, parking, withHook)
		testwait.For(t, 30*time.Second, "agg-0 parked", func() bool {
			return h.committedAtEnd(group) && h.parkedState("agg-0") != nil
		})
		broken.Store(false)
		h.ask("agg-0", park.Skip)
		<-hit // unparked; the request not deleted yet
		rewindPart0(r)
		close(release)
		testwait.For(t, 30*time.Second, "agg-0 #3, #4 handled", func() bool {
			return slices.Equal(sink.of("agg-0"), []uint64{0, 1, 3, 4})
		})
		time.Sleep(5 * time.Second)
		cl, err := kgo.NewClient(brokers(h.c)...)
		if err != nil {
			t.Fatal(err)
		}
		book, err := park.ReadBook(context.Background(), brokers(h.c), kadm.NewClient(cl), testStateTopic)
		cl.Close()
		if err != nil {
			t.Fatal(err)
		}
		if req := book.Request(testTopic, "agg-0"); req != nil {
			t.Errorf("after the skip: its request still pending in the state topic: %s by %s (agg-0 parked: %v)", req.Request.Action, req.Request.By, book.Parked(testTopic, "agg-0") != nil)
		}
		// agg-0 #5 fails for good: agg-0 parks again, nobody asks anything.
		produceValues(t, h.c, testTopic, 1, 1, func(int) []byte { return binary.BigEndian.AppendUint64(nil, 5) })
		testwait.For(t, 30*time.Second, "agg-0 parked again at #5", func() bool {
			return h.committedAtEnd(group) && h.parkedState("agg-0") != nil
		})
		if st := h.parkedState("agg-0"); st.Request != nil {
			t.Logf("wowd parked list shows agg-0 (parked at #5) with pending %s by %s", st.Request.Action, st.Request.By)
		}
		time.Sleep(30 * time.Second)
		if n := len(dlqRecords(t, h.c, testTopic+".dlq", 0)); n != 1 {
			t.Logf("before the partition moves: %d dead letters", n)
		}
		stop(t, r) // the partition moves
		r2 := h.receiver(group, sink, 16, parking)
		time.Sleep(30 * time.Second)
		dead := deadSeqs(t, h.c)
		if !slices.Equal(dead, []uint64{2}) {
			t.Errorf("dead letters %v, want [2] only: #5 was dead-lettered by a skip nobody asked for after it failed", dead)
		}
		if h.parkedState("agg-0") == nil {
			t.Errorf("agg-0 unparked without a request on its new parking")
		}
		stop(t, r2)
	})
}

// A skip's redrive fails again at #3 (the state written: #3 the head, a
// failure) and the partition is rewound before the request is deleted. The
// request is answered: the rewound incarnation deletes it. Before, it stayed
// pending and ignored (the admin page showed the aggregate busy), and when
// the partition moved the next owner did the skip a second time and
// dead-lettered #3, which no operator asked to skip (found by review).
func TestASkipWhoseHeadFailedAgainIsNotDoneTwiceAcrossARewind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const group = "g-failed-again-rewind"
		h := newVirtualHarness(t, 1)
		produce(t, h.c, testTopic, 5, 1) // agg-0 #0..#4
		var broken atomic.Bool
		broken.Store(true)
		sink := newParkSink(func(_ string, seq uint64) bool { return (broken.Load() && seq == 2) || seq == 3 })
		withHook, hit, release := pauseAtLog("parked aggregate: a parked message failed again; the aggregate stays parked with it at the head")
		r := h.receiver(group, sink, 16, parking, withHook)
		testwait.For(t, 30*time.Second, "agg-0 parked", func() bool {
			return h.committedAtEnd(group) && h.parkedState("agg-0") != nil
		})
		broken.Store(false)
		h.ask("agg-0", park.Skip)
		<-hit
		rewindPart0(r)
		close(release)
		time.Sleep(30 * time.Second)
		if st := h.parkedState("agg-0"); st != nil && st.Request != nil {
			t.Errorf("30 s after: agg-0 parked at offset %d, request %s by %s still pending, not acted on", st.Offset, st.Request.Action, st.Request.By)
		}
		stop(t, r)
		r2 := h.receiver(group, sink, 16, parking)
		time.Sleep(30 * time.Second)
		dead := deadSeqs(t, h.c)
		if !slices.Equal(dead, []uint64{2}) {
			t.Errorf("dead letters %v, want [2]: one skip asked, #3 dead-lettered by the same request done a second time", dead)
		}
		stop(t, r2)
	})
}

// TestARequestTheStateAnsweredIsNotDoneAgain: an owner wrote the state of
// a skip whose head failed again (Answered: the skip's ID) and died
// before deleting the request. The next owner deletes the request instead
// of doing the skip a second time on the new head.
func TestARequestTheStateAnsweredIsNotDoneAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const group = "g-park-answered"
		h := newVirtualHarness(t, 1)
		sink, _, r := parkAgg0(t, h, group)
		stop(t, r)
		st := h.parkedState("agg-0")
		st.Answered = "r1"
		h.produceState(stateRecord(testStateTopic, st))
		h.askAs("agg-0", park.Request{Action: park.Skip, By: "test", ID: "r1"})
		r2 := h.receiver(group, sink, 16, parking)
		defer stop(t, r2)
		testwait.For(t, 30*time.Second, "the answered request deleted", func() bool {
			st := h.parkedState("agg-0")
			return st != nil && st.Request == nil
		})
		time.Sleep(10 * time.Second)
		if dl := dlqRecords(t, h.c, testTopic+".dlq", 0); len(dl) != 0 {
			t.Errorf("%d dead letters: the answered skip was done again", len(dl))
		}
		if got := sink.of("agg-0"); !slices.Equal(got, seqs(0, 2)) {
			t.Errorf("agg-0 handled %v, want %v (still parked at #2)", got, seqs(0, 2))
		}
	})
}

// TestARequestOnAnEarlierParkingIsVoid: a skip asked on an earlier parking
// of the aggregate (its state's since is not the current parking's), whose
// delete was lost, is deleted by the owner, not done on the current
// parking's head.
func TestARequestOnAnEarlierParkingIsVoid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const group = "g-park-earlier"
		h := newVirtualHarness(t, 1)
		sink, _, r := parkAgg0(t, h, group)
		stop(t, r)
		st := h.parkedState("agg-0")
		st.Since = st.Since.Add(-time.Hour)
		st.Request = &park.Request{Action: park.Skip, By: "test", ID: "r0", At: st.Since}
		h.produceState(&kgo.Record{Topic: testStateTopic, Key: []byte(park.RequestKey(testTopic, "agg-0", "r0")), Value: st.Marshal()})
		r2 := h.receiver(group, sink, 16, parking)
		defer stop(t, r2)
		testwait.For(t, 30*time.Second, "the earlier parking's request deleted", func() bool {
			st := h.parkedState("agg-0")
			return st != nil && st.Request == nil
		})
		time.Sleep(10 * time.Second)
		if dl := dlqRecords(t, h.c, testTopic+".dlq", 0); len(dl) != 0 {
			t.Errorf("%d dead letters: a skip of an earlier parking was done on this one", len(dl))
		}
	})
}

// TestASkipAskedOnAnotherHeadIsVoid: a skip dead-letters the head whose
// failure the asker saw, never another. A skip asked on another head (a
// second skip asked while the first ran, which moved on to a message that
// then failed), or on this head before it failed (the state then showed it
// not tried yet), is deleted by the owner, not done: it dead-lettered the
// new head, whose failure nobody saw, and unparked the aggregate past it.
func TestASkipAskedOnAnotherHeadIsVoid(t *testing.T) {
	for _, tc := range []struct {
		name string
		seen func(st *park.State)
	}{
		{"another head", func(st *park.State) { st.Head.Offset-- }},
		{"this head before it failed", func(st *park.State) { st.Skipped = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				group := "g-park-unseen-" + strconv.Itoa(len(tc.name))
				h := newVirtualHarness(t, 1)
				sink, _, r := parkAgg0(t, h, group)
				stop(t, r)
				st := h.parkedState("agg-0")
				tc.seen(st)
				st.Request = &park.Request{Action: park.Skip, By: "test", ID: "r0", At: st.Since}
				h.produceState(&kgo.Record{Topic: testStateTopic, Key: []byte(park.RequestKey(testTopic, "agg-0", "r0")), Value: st.Marshal()})
				r2 := h.receiver(group, sink, 16, parking)
				defer stop(t, r2)
				testwait.For(t, 30*time.Second, "the request deleted", func() bool {
					st := h.parkedState("agg-0")
					return st != nil && st.Request == nil
				})
				time.Sleep(10 * time.Second)
				if dl := dlqRecords(t, h.c, testTopic+".dlq", 0); len(dl) != 0 {
					t.Errorf("%d dead letters: a skip asked on %s was done on the failed head", len(dl), tc.name)
				}
				if got := sink.of("agg-0"); !slices.Equal(got, seqs(0, 2)) {
					t.Errorf("agg-0 handled %v, want %v (still parked at #2)", got, seqs(0, 2))
				}
			})
		})
	}
}

// TestAVoidSkipLeavesTheRunningRedrivesRequest: a skip asked on another
// head (void) while a redrive runs is deleted alone. It deleted every
// request written before it, the running redrive's too; cut short by a
// rebalance, that redrive was then not resumed by the next owner, and the
// aggregate stayed parked with no request.
func TestAVoidSkipLeavesTheRunningRedrivesRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 120
		h := newVirtualHarness(t, 1)
		produce(t, h.c, testTopic, n, 1) // agg-0 only: seq 0..n-1
		var broken atomic.Bool
		broken.Store(true)
		var handled atomic.Int64
		hd := handler.Sync(func(_ context.Context, m *handler.Message) error {
			if broken.Load() && binary.BigEndian.Uint64(m.Value) == 2 {
				return handler.Classed(handler.Permanent, errors.New("rejected"))
			}
			time.Sleep(20 * time.Millisecond) // the redrive takes a while
			handled.Add(1)
			return nil
		})
		r1 := h.receiver("g-park-void-busy", hd, 16, parking)
		testwait.For(t, 30*time.Second, "agg-0 parked and committed", func() bool {
			return h.committedAtEnd("g-park-void-busy") && h.parkedState("agg-0") != nil
		})
		broken.Store(false)
		h.ask("agg-0", park.Redrive)
		testwait.For(t, 30*time.Second, "the redrive under way", func() bool { return handled.Load() >= 20 })
		st := h.parkedState("agg-0")
		st.Head.Offset += 1000 // a head this aggregate never had: void
		st.Skipped = false
		st.Request = &park.Request{Action: park.Skip, By: "test", ID: "void", At: st.Since}
		h.produceState(&kgo.Record{Topic: testStateTopic, Key: []byte(park.RequestKey(testTopic, "agg-0", "void")), Value: st.Marshal()})
		time.Sleep(time.Second) // the owner reads it and deletes it
		r2 := h.receiver("g-park-void-busy", hd, 16, parking)
		stop(t, r1) // the partition moves to r2 in the middle of the redrive
		testwait.For(t, 60*time.Second, "agg-0 redriven by the new owner and unparked", func() bool {
			return h.parkedState("agg-0") == nil
		})
		if dl := dlqRecords(t, h.c, testTopic+".dlq", 0); len(dl) != 0 {
			t.Errorf("%d dead letters: the void skip was done", len(dl))
		}
		stop(t, r2)
	})
}
