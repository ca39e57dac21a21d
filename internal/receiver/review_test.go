package receiver

// Regression tests of the defects a review of the delivery fixes found;
// each failed before its fix.

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/handlers"
	"github.com/wowd/wowd/internal/testwait"
)

// handFetch is a fetch of partition 0 of testTopic for polls driven by hand.
func handFetch(key func(o int64) string, from, to int64) kgo.FetchTopicPartition {
	fp := kgo.FetchTopicPartition{Topic: testTopic, FetchPartition: kgo.FetchPartition{Partition: 0, HighWatermark: to}}
	for o := from; o < to; o++ {
		fp.Records = append(fp.Records, &kgo.Record{Topic: testTopic, Partition: 0, Offset: o, Key: []byte(key(o))})
	}
	return fp
}

// A poll is sized by the room in the window before it blocks; the ingest
// can take that room meanwhile. The window must still hold.
func TestIngestAndPollStayWithinTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window = 16
		h := newVirtualHarness(t, 1)
		var mu sync.Mutex
		var acks []handler.Ack
		hd := handlerFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
			mu.Lock()
			acks = append(acks, ack) // answered later, so that everything stays in flight
			mu.Unlock()
		})
		r := h.receiver("g-admit-window", hd, window)
		testwait.For(t, 10*time.Second, "the partition assigned", func() bool { return r.Ready() && len(r.active()) == 1 })
		time.Sleep(300 * time.Millisecond) // the poll loop blocks in a poll sized for the whole window
		for i := range window {
			if _, err := r.Admit(context.Background(), &kgo.Record{Topic: testTopic, Key: []byte("local-" + strconv.Itoa(i)), Value: []byte("x")}); err != nil {
				t.Fatal(err)
			}
		}
		produce(t, h.c, testTopic, window, window)
		most := 0
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			most = max(most, r.InFlight())
		}
		if most > window {
			t.Fatalf("%d records unfinished, window %d", most, window)
		}
		// Answer everything: the fetched records, refused while the window was
		// full, come again and finish.
		stopAcking := make(chan struct{})
		var acking sync.WaitGroup
		acking.Go(func() {
			for {
				mu.Lock()
				for _, a := range acks {
					a.Done(nil)
				}
				acks = nil
				mu.Unlock()
				select {
				case <-stopAcking:
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
		})
		testwait.For(t, 20*time.Second, "the fetched records finished", func() bool { return h.committedAtEnd("g-admit-window") })
		stop(t, r)
		close(stopAcking)
		acking.Wait()
	})
}

// A try that ignores its context, in an incarnation closed at a revoke's
// deadline, still times out: its aggregate's mailbox moves on.
func TestHungTryOfAClosedIncarnationTimesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		var mu sync.Mutex
		calls := map[int64]int{}
		hd := handlerFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
			mu.Lock()
			calls[m.Offset]++
			n := calls[m.Offset]
			mu.Unlock()
			if m.Offset == 0 && n == 1 {
				return // hangs, and ignores its context
			}
			ack.Done(nil)
		})
		r := h.receiver("g-hung", hd, 64, func(o *Options) {
			o.HandlerTimeout = 300 * time.Millisecond
			o.RevokeTimeout = 100 * time.Millisecond
		})
		stop(t, r) // the polls and rebalances below are driven by hand
		r.stopping.Store(false)
		r.closing.Store(false)
		r.watchStop, r.watchDone = make(chan struct{}), make(chan struct{})
		go r.watchDeadlines()
		defer func() { close(r.watchStop); <-r.watchDone }()
		assigned := map[string][]int32{testTopic: {0}}
		sameKey := func(int64) string { return "A" }
		r.onAssigned(context.Background(), r.cl, assigned)
		r.admitPartition(handFetch(sameKey, 0, 2))
		time.Sleep(50 * time.Millisecond)
		r.onRevoked(context.Background(), r.cl, assigned) // its deadline passes with offset 0 hung
		r.onAssigned(context.Background(), r.cl, assigned)
		r.admitPartition(handFetch(sameKey, 0, 2))
		testwait.For(t, 5*time.Second, "the new incarnation's records of the aggregate to run", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return calls[0] >= 2 && calls[1] >= 1
		})
		r.closePartition(r.parts[tp{testTopic, 0}])
	})
}

// A try of a revoked partition that is draining is still held to its
// deadline: its context ends with DeadlineExceeded at the handler timeout,
// not only when the drain gives up (revoke timeout) and closes it.
func TestTryOfADrainingPartitionEndsAtItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		ended := make(chan error, 1)
		hd := handlerFunc(func(ctx context.Context, m *handler.Message, ack handler.Ack) {
			go func() {
				<-ctx.Done()
				ended <- ctx.Err()
				ack.Done(ctx.Err())
			}()
		})
		r := h.receiver("g-drain-deadline", hd, 16, func(o *Options) {
			o.HandlerTimeout = 300 * time.Millisecond
			o.RevokeTimeout = 2 * time.Second
		})
		stop(t, r) // the polls and rebalances below are driven by hand
		r.stopping.Store(false)
		r.closing.Store(false)
		r.watchStop, r.watchDone = make(chan struct{}), make(chan struct{})
		go r.watchDeadlines()
		defer func() { close(r.watchStop); <-r.watchDone }()
		assigned := map[string][]int32{testTopic: {0}}
		r.onAssigned(context.Background(), r.cl, assigned)
		r.admitPartition(handFetch(func(int64) string { return "A" }, 0, 1))
		revoked := make(chan struct{})
		go func() {
			r.onRevoked(context.Background(), r.cl, assigned) // drains: waits for the try
			close(revoked)
		}()
		select {
		case err := <-ended:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("the try ended with %v, want its deadline", err)
			}
		case <-time.After(1500 * time.Millisecond): // before the revoke timeout
			t.Fatal("the try of the draining partition ran past its deadline with its context alive")
		}
		<-revoked
	})
}

// A revoke that drains while Stop runs holds commitMu: it must not make
// Stop overrun its deadline.
func TestStopDoesNotOverrunBehindARevoke(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		hd := handlerFunc(func(ctx context.Context, m *handler.Message, ack handler.Ack) {
			go func() { <-ctx.Done(); ack.Done(ctx.Err()) }()
		})
		r := h.receiver("g-stop-revoke", hd, 16, func(o *Options) { o.RevokeTimeout = 4 * time.Second })
		produce(t, h.c, testTopic, 4, 4)
		testwait.For(t, 10*time.Second, "four records in flight", func() bool { return r.InFlight() == 4 })
		revoked := make(chan struct{})
		go func() { // as kgo would during a rebalance
			r.onRevoked(context.Background(), r.cl, map[string][]int32{testTopic: {0}})
			close(revoked)
		}()
		time.Sleep(100 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		began := time.Now()
		_ = r.Stop(ctx)
		if took := time.Since(began); took > 2*time.Second {
			t.Fatalf("Stop with a 500ms deadline took %v behind a revoke", took)
		}
		<-revoked
	})
}

// A periodic commit that hangs (the coordinator does not answer) holds
// commitMu, which Stop's final commit waits for: it must end at Stop's
// deadline, not at commitTimeout. The final commit still gets its own
// commitTimeout past the deadline (by design: a drain that used the whole
// deadline must not skip it), and here it hangs too, as does the client's
// leave behind it on the same connection (franz-go bounds that one by its
// 10 s request overhead): 20 s in all, where a periodic commit that ignored
// the deadline made it 40–50 s (another commitTimeout per tick it took).
func TestStopDoesNotOverrunBehindAHungCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		hang := unanswered(h.c, kmsg.OffsetCommit)
		r := h.receiver("g-stop-hung-commit", acking, 16)
		hang.on.Store(true)
		produce(t, h.c, testTopic, 4, 4)
		testwait.For(t, 10*time.Second, "a periodic commit hung", func() bool { return hang.hung.Load() > 0 })
		stopWithin(t, r, "a hung periodic commit", 2*commitTimeout+2*time.Second)
		hang.on.Store(false)
	})
}

// A try that times out while the HTTP sink still holds it (queued behind a
// slow request) is dropped by the sink: its message does not reach the sink
// after the aggregate's next one.
func TestTimedOutTryIsDroppedByTheSink(t *testing.T) {
	h := newHarness(t, 1)
	var mu sync.Mutex
	var order []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		id := req.Header.Get("ce-subject") + "@" + req.Header.Get("kafka-offset")
		if req.Header.Get("ce-subject") != "A" {
			time.Sleep(250 * time.Millisecond) // B and C hold the sink's only connection
		}
		mu.Lock()
		order = append(order, id)
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	var reg handler.Registry
	handlers.Register(&reg)
	spec, _ := reg.Lookup("http")
	cfg := spec.Config().(*handlers.HTTPConfig)
	cfg.URL = srv.URL
	cfg.RequestTimeout = 300 * time.Millisecond
	cfg.MaxConcurrency = 1
	var rcv atomic.Pointer[Receiver]
	hd, err := spec.New(cfg, handler.Deps{Dispatcher: "d", Service: "svc", Timeout: 400 * time.Millisecond,
		Observer: observerFunc(func(m *handler.Message, attempt int, err error, wait time.Duration) {
			if r := rcv.Load(); r != nil {
				r.Retrying(m, attempt, err, wait)
			}
		})})
	if err != nil {
		t.Fatal(err)
	}
	defer hd.(handler.Closer).Close(context.Background())
	produceAt(t, h.c, testTopic, 0, "B", "C", "A", "A") // A@2 queues behind B and C and times out there
	r := h.receiver("g-http-stale", hd, 16, func(o *Options) { o.HandlerTimeout = 400 * time.Millisecond })
	rcv.Store(r)
	testwait.For(t, 20*time.Second, "every record finished", func() bool { return h.committedAtEnd("g-http-stale") })
	time.Sleep(time.Second) // a stale request would arrive now
	stop(t, r)
	mu.Lock()
	defer mu.Unlock()
	last := map[string]int{}
	for i, id := range order {
		last[id] = i
	}
	if a2, ok := last["A@2"]; ok && a2 > last["A@3"] {
		t.Fatalf("A@2 reached the sink after A@3: %v", order)
	}
}

// observerFunc is a handler.Observer.
type observerFunc func(m *handler.Message, attempt int, err error, wait time.Duration)

func (f observerFunc) Retrying(m *handler.Message, attempt int, err error, wait time.Duration) {
	f(m, attempt, err, wait)
}

// A retake whose offset reads hang (the coordinator does not answer) holds
// kgo's assign callback, and with it the poll loop Stop waits for: the
// reads must end at Stop's deadline, not after three attempts of 10 s
// each. Past the deadline a request behind the unanswered read on the same
// connection still waits out its own bound (10 s: Stop took 10 s with the
// fix, 30 s with the reads' deadline removed); the bound allows for both
// the final commit's and the leave's, as TestStopDoesNotOverrunBehindAHungCommit
// does. The drop is simulated as in
// TestRetakeAfterTheCoordinatorDroppedTheMember.
func TestStopDoesNotOverrunBehindARetakesReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		hang := unanswered(h.c, kmsg.OffsetFetch)
		const group = "g-stop-hung-retake"
		core, logs := observer.New(zap.InfoLevel)
		r := h.receiver(group, acking, 16, func(o *Options) { o.Logger = zap.New(zapcore.NewTee(o.Logger.Core(), core)) })
		produce(t, h.c, testTopic, 4, 4)
		testwait.For(t, 10*time.Second, "every record finished", func() bool { return h.committedAtEnd(group) })
		hang.on.Store(true)
		r.member = "a member ID the coordinator dropped"
		r.cl.ForceRebalance()
		testwait.For(t, 10*time.Second, "retake's read hung", func() bool { return hang.hung.Load() > 0 })
		stopWithin(t, r, "a retake's hung reads", 2*commitTimeout+2*time.Second)
		hang.on.Store(false)
		// The reads were cut because the receiver stops: no fallback to
		// warn of, nothing is admitted any more.
		for _, e := range logs.All() {
			if e.Level >= zap.WarnLevel && (strings.Contains(e.Message, "taken again restart") || strings.Contains(e.Message, "may be skipped")) {
				t.Errorf("a stop that cut retake's reads logged %v %q", e.Level, e.Message)
			}
		}
		if logs.FilterMessageSnippet("not read from anywhere").Len() == 0 {
			t.Error("the stop that cut retake's reads was not logged")
		}
	})
}

// A JoinGroup the coordinator does not answer (it holds one until every
// member rejoined, up to the rebalance timeout) keeps the client's group
// management running, and the client's Close waits for it before leaving;
// franz-go ends the request only when the client's own context ends. Stop
// must still end within its deadline, the final commit's commitTimeout
// (the client holds commits while it joins) and leaveTimeout: it took
// 10.5 s, where a Close left to the join took 70 s (kgo's default
// rebalance timeout and its 10 s request overhead). Found by the
// simulation (seed 1023, a stop during a rebalance).
func TestStopDoesNotOverrunBehindAHungJoin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		hang := unanswered(h.c, kmsg.JoinGroup)
		const group = "g-stop-hung-join"
		r := h.receiver(group, acking, 16)
		produce(t, h.c, testTopic, 4, 4)
		testwait.For(t, 10*time.Second, "every record finished", func() bool { return h.committedAtEnd(group) })
		hang.on.Store(true)
		r.cl.ForceRebalance()
		testwait.For(t, 10*time.Second, "a join hung", func() bool { return hang.hung.Load() > 0 })
		stopWithin(t, r, "a hung join", commitTimeout+leaveTimeout+2*time.Second)
		hang.on.Store(false)
	})
}

// acking acknowledges every message at once.
var acking = handlerFunc(func(_ context.Context, _ *handler.Message, ack handler.Ack) { ack.Done(nil) })

// hangingKey is a kind of request the broker leaves unanswered while on is
// set; hung counts the requests left so.
type hangingKey struct {
	on   atomic.Bool
	hung atomic.Int32
}

// unanswered makes c leave the requests of key unanswered (the client's
// request waits for its context) while the returned key's on is set.
func unanswered(c *kfake.Cluster, key kmsg.Key) *hangingKey {
	return unansweredIf(c, key, func(kmsg.Request) bool { return true })
}

// unansweredIf is unanswered for the requests of key that match.
func unansweredIf(c *kfake.Cluster, key kmsg.Key, match func(kmsg.Request) bool) *hangingKey {
	k := &hangingKey{}
	c.ControlKey(int16(key), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !k.on.Load() || !match(req) {
			return nil, nil, false
		}
		k.hung.Add(1)
		return nil, nil, true
	})
	return k
}

// stopWithin stops r with a 500ms deadline and fails if Stop takes more
// than the deadline plus past.
func stopWithin(t *testing.T, r *Receiver, behind string, past time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	began := time.Now()
	_ = r.Stop(ctx)
	if took, bound := time.Since(began), 500*time.Millisecond+past; took > bound {
		t.Fatalf("Stop with a 500ms deadline took %v behind %s (bound %v)", took, behind, bound)
	}
}
