package executor

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wowd/wowd/internal/testwait"
)

// Two blocking tasks of different keys that reach the pool while one of its
// goroutines is idle, far below its bound, each get a goroutine: the second
// does not wait behind the first, which blocks (the reason the group is
// blocking). Both found the one idle goroutine and signalled it, and no
// goroutine was started. Found by review.
func TestBlockingPoolStartsAGoroutinePerQueuedTask(t *testing.T) {
	for round := range 10 {
		e := New(Options{Workers: 1, BlockingWorkers: 4})
		g := e.Group(true)
		runAll(t, g, []string{"warm"}) // the pool now has one goroutine
		testwait.For(t, 10*time.Second, "the pool's goroutine to be idle", func() bool {
			e.blocking.mu.Lock()
			defer e.blocking.mu.Unlock()
			return e.blocking.idle == 1 && e.blocking.started == 1
		})
		release := make(chan struct{})
		yRan := make(chan struct{})
		x := fn(func(Resume) Status { <-release; return Done })
		y := fn(func(Resume) Status { close(yRan); return Done })
		if _, err := g.SubmitBatch([]string{"x", "y"}, []Task{x, y}); err != nil {
			t.Fatal(err)
		}
		var stalled bool
		select {
		case <-yRan:
		case <-time.After(10 * time.Second): // without a goroutine of its own, until x ends
			stalled = true
		}
		e.blocking.mu.Lock()
		started, idle, queued := e.blocking.started, e.blocking.idle, len(e.blocking.q)
		e.blocking.mu.Unlock()
		close(release)
		closeOK(t, e)
		if stalled {
			t.Fatalf("round %d: key y's blocking task waited 10s behind key x's while the pool had %d of 4 goroutines (idle %d, queued %d)",
				round, started, idle, queued)
		}
	}
}

// Stats.Completed (exported as the counter
// wowd_executor_messages_total{state="completed"}) never decreases and never
// exceeds what was submitted. Every task here fails synchronously, so it
// stays 0: a worker published completed and failed as two stores that Stats
// read as two loads and subtracted, which went backwards or wrapped between
// them. Found by review.
func TestStatsCompletedIsMonotone(t *testing.T) {
	e := New(Options{Workers: 2})
	defer closeOK(t, e)
	g := e.Group(false)
	stop := make(chan struct{})
	var bad atomic.Value
	var rd sync.WaitGroup
	rd.Add(1)
	go func() {
		defer rd.Done()
		var last uint64
		for {
			select {
			case <-stop:
				return
			default:
			}
			s := e.Stats()
			if s.Completed < last || s.Completed > s.Submitted {
				bad.Store("Completed went from " + strconv.FormatUint(last, 10) + " to " + strconv.FormatUint(s.Completed, 10) +
					" (submitted " + strconv.FormatUint(s.Submitted, 10) + ", failed " + strconv.FormatUint(s.Failed, 10) + ")")
				return
			}
			last = s.Completed
		}
	}()
	fail := fn(func(Resume) Status { return Failed })
	keys := make([]string, 64)
	tasks := make([]Task, 64)
	for i := range keys {
		keys[i], tasks[i] = "k"+strconv.Itoa(i), fail
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && bad.Load() == nil {
		if _, err := g.SubmitBatch(keys, tasks); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	rd.Wait()
	if msg := bad.Load(); msg != nil {
		t.Fatal(msg)
	}
}

// A batch is placed on a parked worker even when that worker still carries
// a stuck mark: a watcher that saw its long turn running can set the mark
// just as the turn ends, and the mark then outlives it. placeAll passed over
// every marked worker, parked ones too, so a batch submitted while the other
// worker was in a long turn waited for that turn to end, with a worker
// parked. Found by review.
func TestBatchIsPlacedOnAParkedWorkerMarkedStuck(t *testing.T) {
	e := New(Options{Workers: 2})
	defer closeOK(t, e)
	g := e.Group(false)
	testwait.For(t, 10*time.Second, "both workers parked", func() bool {
		for _, w := range e.workers {
			if w.inbox.Load() != parked || w.watching.Load() {
				return false
			}
		}
		return true
	})
	// A long turn on worker 1; worker 0 parked with a mark left over from
	// a turn of its own, as the race above leaves it.
	marked, other := e.workers[0], e.workers[1]
	marked.stuck.Store(true)
	var key string
	for i := 0; ; i++ {
		k := "long-" + strconv.Itoa(i)
		if int((e.hashKey(g.id, false, k)>>32)%uint64(len(e.workers))) == other.id {
			key = k
			break
		}
	}
	release := make(chan struct{})
	defer close(release)
	if err := g.Submit(key, fn(func(Resume) Status { <-release; return Done })); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the long turn to start on worker 1", func() bool { return other.turnSeq.Load()&1 == 1 })
	if marked.inbox.Load() != parked {
		t.Skip("worker 0 woke for the long turn's key; the scenario needs it parked") // placement prefers the free worker 1's share
	}
	var wg sync.WaitGroup
	wg.Add(2)
	quick := fn(func(Resume) Status { wg.Done(); return Done })
	if _, err := g.SubmitBatch([]string{"a", "b"}, []Task{quick, quick}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second): // placed behind the long turn: until it ends
		t.Fatalf("a batch waited 10s behind a long turn while worker 0 sat parked (marked stuck: %v)", marked.stuck.Load())
	}
}
