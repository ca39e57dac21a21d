package receiver

import (
	"context"
	"errors"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/executor"
	"github.com/wowd/wowd/internal/testwait"
)

// TestHeldRetriesOfABlockerStayOnThePool: a Blocker is called on the
// executor's blocking pool only, at most blocking-workers at once, retries
// of held messages included. Each of 8 messages (8 aggregates) fails its
// first attempt, with dead letters off, so all are held and retried about
// together: the retries ran on their timers' goroutines, 8 at once against
// a pool of 2.
func TestHeldRetriesOfABlockerStayOnThePool(t *testing.T) {
	ex, h := blockingSetup(t, 2)
	f := &failOnce{d: 30 * time.Millisecond}
	hd := handlerFunc(f.call)
	r := h.receiver("g-blocking", hd, 64, func(o *Options) {
		rt := o.Routes[testTopic]
		rt.Group = ex.Group(true) // the route of a handler.Blocker
		o.Routes = map[string]Route{testTopic: rt}
		o.DeadLetter.Enabled = false
		o.RetryBackoff = 200 * time.Millisecond
	})
	testwait.For(t, 20*time.Second, "every message handled and committed", func() bool { return h.committedAtEnd("g-blocking") })
	stop(t, r)
	tried := f.calls()
	if len(tried) != 8 {
		t.Fatalf("%d aggregates tried, want 8", len(tried))
	}
	if m := f.most.Load(); m > 2 {
		t.Errorf("the Blocker ran %d calls at once; the blocking pool has 2 goroutines", m)
	}
}

// TestQueuedRetryOfAClosedPartitionIsAbandoned: a held message's retry
// that waits for the blocking pool (busy with a call that ignores its
// context) when its partition closes is given up, not made: the handler
// was called after Stop returned, for a message the next owner may have
// handled already.
func TestQueuedRetryOfAClosedPartitionIsAbandoned(t *testing.T) {
	ex := executor.New(executor.Options{Workers: 2, BlockingWorkers: 1})
	h := &harness{t: t, c: newCluster(t, 1, testTopic), ex: ex}
	produceAt(t, h.c, testTopic, 0, "agg-0")
	release, stuck := make(chan struct{}), make(chan struct{})
	var stopped atomic.Bool
	var failed sync.Once
	failedOnce := make(chan struct{})
	hd := handlerFunc(func(ctx context.Context, m *handler.Message, ack handler.Ack) {
		if stopped.Load() {
			t.Errorf("handler called for %s at offset %d after Stop returned (context: %v)", m.AggregateID, m.Offset, ctx.Err())
		}
		if m.AggregateID == "agg-0" {
			failed.Do(func() { close(failedOnce) })
			ack.Done(handler.Classed(handler.Transient, errors.New("database down")))
			return
		}
		close(stuck)
		<-release // a Blocker stuck in a call, ignoring its context
		ack.Done(nil)
	})
	r := h.receiver("g-queued-retry", hd, 64, func(o *Options) {
		rt := o.Routes[testTopic]
		rt.Group = ex.Group(true)
		o.Routes = map[string]Route{testTopic: rt}
		o.DeadLetter.Enabled = false
		o.RetryBackoff = 2 * time.Second // agg-0's retry comes after 1-2 s
	})
	// agg-1 only once agg-0 failed: on a pool of one, agg-1's call must be
	// the one holding it when agg-0's retry is due.
	<-failedOnce
	produceAt(t, h.c, testTopic, 0, "agg-1")
	<-stuck
	time.Sleep(2500 * time.Millisecond) // agg-0's retry is queued for the pool
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_ = r.Stop(ctx) // past its deadline: agg-1's call never returns in time
	cancel()
	stopped.Store(true)
	close(release)
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ccancel()
	_ = ex.Close(cctx) // runs what the pool still holds
}

// blockingFunc is a handler.Blocker calling its function.
type blockingFunc func(ctx context.Context, m *handler.Message, ack handler.Ack)

func (f blockingFunc) Handle(ctx context.Context, m *handler.Message, ack handler.Ack) {
	f(ctx, m, ack)
}
func (blockingFunc) Blocking() bool { return true }

// TestRetriesOfABlockerInWithRetryStayOnThePool: a Blocker wrapped in
// handler.WithRetry (as the audit example plugin is) is still a Blocker,
// routed to the blocking pool as the daemon routes it, and its retries
// stay within the pool's bound too. Each of 8 messages (8 aggregates)
// blocks 100ms per call and fails its first call transiently; WithRetry
// retries it after 25 to 50ms. The pool of 2 runs the first calls in four
// waves of two; the retries of a wave came due during the next waves and
// ran on their timers' goroutines, beside them: 5 or 6 calls at once,
// against a pool of 2.
func TestRetriesOfABlockerInWithRetryStayOnThePool(t *testing.T) {
	const pool = 2
	ex, h := blockingSetup(t, pool)
	f := &failOnce{d: 100 * time.Millisecond}
	inner := blockingFunc(f.call)
	hd := handler.WithRetry(inner, handler.RetryPolicy{Initial: 50 * time.Millisecond, Max: 50 * time.Millisecond})
	b, ok := hd.(handler.Blocker)
	if !ok || !b.Blocking() {
		t.Fatal("WithRetry over a Blocker is not a Blocker")
	}
	r := h.receiver("g-blocking-withretry", hd, 64, func(o *Options) {
		rt := o.Routes[testTopic]
		rt.Group = ex.Group(b.Blocking()) // as the daemon routes a handler.Blocker
		o.Routes = map[string]Route{testTopic: rt}
	})
	testwait.For(t, 20*time.Second, "every message handled and committed", func() bool { return h.committedAtEnd("g-blocking-withretry") })
	stop(t, r)
	tried := f.calls()
	if len(tried) != 8 {
		t.Fatalf("%d aggregates tried, want 8", len(tried))
	}
	for agg, n := range tried {
		if n != 2 {
			t.Errorf("%s called %d times, want 2 (a failure, a retry)", agg, n)
		}
	}
	if m := f.most.Load(); m > pool {
		t.Errorf("the Blocker ran %d calls at once; the blocking pool has %d goroutines", m, pool)
	}
}

// blockingSetup is an executor with a blocking pool of pool goroutines
// (closed at the end of the test) and a harness on one partition holding
// eight records of eight aggregates.
func blockingSetup(t *testing.T, pool int) (*executor.Executor, *harness) {
	ex := executor.New(executor.Options{Workers: 2, BlockingWorkers: pool})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := ex.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	h := &harness{t: t, c: newCluster(t, 1, testTopic), ex: ex}
	produce(t, h.c, testTopic, 8, 8)
	return ex, h
}

// failOnce is a handler call that blocks for d, fails each aggregate's
// first message transiently and handles the rest; it counts the most calls
// it saw running at once and the calls per aggregate.
type failOnce struct {
	d             time.Duration
	running, most atomic.Int32
	mu            sync.Mutex     // guards tried
	tried         map[string]int // calls per aggregate ID
}

func (f *failOnce) call(_ context.Context, m *handler.Message, ack handler.Ack) {
	n := f.running.Add(1)
	for m := f.most.Load(); n > m && !f.most.CompareAndSwap(m, n); m = f.most.Load() {
	}
	time.Sleep(f.d) // blocks, as a Blocker does
	f.running.Add(-1)
	f.mu.Lock()
	if f.tried == nil {
		f.tried = map[string]int{}
	}
	f.tried[m.AggregateID]++
	first := f.tried[m.AggregateID] == 1
	f.mu.Unlock()
	if first {
		ack.Done(handler.Classed(handler.Transient, errors.New("database down")))
		return
	}
	ack.Done(nil)
}

// calls returns the calls made per aggregate ID.
func (f *failOnce) calls() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.tried)
}

// TestABlockerInWithRetryFreesThePoolDuringItsBackoff: while a Blocker in
// handler.WithRetry waits out a backoff, the goroutine of the blocking
// pool it ran on serves other messages (the try's context has the pool as
// its handler.Resumer), and its next attempt still runs on the pool. With
// a pool of one, agg-0's first call fails and waits 1.5 to 3 s: the seven
// other aggregates waited for that whole backoff behind it, the pool's
// only goroutine asleep in WithRetry.
func TestABlockerInWithRetryFreesThePoolDuringItsBackoff(t *testing.T) {
	ex, h := blockingSetup(t, 1)
	var (
		mu       sync.Mutex // guards failedAt, others, retriedAt
		failedAt time.Time
		others   []time.Time // the other aggregates' calls
		retried  time.Time   // agg-0's second call
		running  atomic.Int32
		most     atomic.Int32
	)
	inner := blockingFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(5 * time.Millisecond) // blocks, as a Blocker does
		running.Add(-1)
		mu.Lock()
		now := time.Now()
		var err error
		switch {
		case m.AggregateID != "agg-0":
			others = append(others, now)
		case failedAt.IsZero():
			failedAt = now
			err = handler.Classed(handler.Transient, errors.New("database down"))
		default:
			retried = now
		}
		mu.Unlock()
		ack.Done(err)
	})
	hd := handler.WithRetry(inner, handler.RetryPolicy{Initial: 3 * time.Second, Max: 3 * time.Second})
	r := h.receiver("g-blocking-backoff", hd, 64, func(o *Options) {
		rt := o.Routes[testTopic]
		rt.Group = ex.Group(true) // as the daemon routes a handler.Blocker
		o.Routes = map[string]Route{testTopic: rt}
	})
	testwait.For(t, 20*time.Second, "every message handled and committed", func() bool { return h.committedAtEnd("g-blocking-backoff") })
	stop(t, r)
	mu.Lock()
	defer mu.Unlock()
	if len(others) != 7 || retried.IsZero() {
		t.Fatalf("%d other aggregates handled, agg-0 retried: %v; want 7 and true", len(others), !retried.IsZero())
	}
	if wait := retried.Sub(failedAt); wait < 1400*time.Millisecond {
		t.Errorf("agg-0 retried %v after its failure, before its backoff (1.5 to 3 s) was over", wait)
	}
	for _, at := range others {
		if at.After(retried) {
			t.Errorf("another aggregate handled %v after agg-0's failure, after its retry: the pool waited out the backoff", at.Sub(failedAt))
		}
	}
	if m := most.Load(); m > 1 {
		t.Errorf("the Blocker ran %d calls at once; the blocking pool has 1 goroutine", m)
	}
}
