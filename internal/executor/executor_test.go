package executor

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wowd/wowd/internal/testwait"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func closeOK(t *testing.T, e *Executor) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// fn adapts a function to a Task.
type fn func(r Resume) Status

func (f fn) Run(r Resume) Status { return f(r) }

// orderChecker records, per key, that tasks start in submit order, one at a
// time, each exactly once.
type orderChecker struct {
	running []atomic.Int32
	next    []atomic.Int64
	errs    chan error
}

func newOrderChecker(keys int) *orderChecker {
	return &orderChecker{running: make([]atomic.Int32, keys), next: make([]atomic.Int64, keys), errs: make(chan error, 16)}
}

func (c *orderChecker) fail(err error) {
	select {
	case c.errs <- err:
	default:
	}
}

func (c *orderChecker) start(key int, seq int64) {
	if !c.running[key].CompareAndSwap(0, 1) {
		c.fail(fmt.Errorf("key %d: task %d started while another of the key was running", key, seq))
	}
	if got := c.next[key].Load(); got != seq {
		c.fail(fmt.Errorf("key %d: task %d started, expected %d", key, seq, got))
	}
}

func (c *orderChecker) end(key int, seq int64) {
	c.next[key].Store(seq + 1)
	c.running[key].Store(0)
}

type orderTask struct {
	c    *orderChecker
	key  int
	seq  int64
	mode int // 0 sync, 1 async later, 2 async completed before Run returns, 3 sync failure
	wg   *sync.WaitGroup
}

func (t *orderTask) Run(r Resume) Status {
	t.c.start(t.key, t.seq)
	switch t.mode {
	case 1:
		go func() {
			if t.seq%3 == 0 {
				time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
			}
			t.c.end(t.key, t.seq)
			t.wg.Done()
			r.Complete(t.seq%7 == 0)
		}()
		return Pending
	case 2:
		t.c.end(t.key, t.seq)
		t.wg.Done()
		r.Complete(false)
		return Pending
	case 3:
		t.c.end(t.key, t.seq)
		t.wg.Done()
		return Failed
	}
	t.c.end(t.key, t.seq)
	t.wg.Done()
	return Done
}

func TestOrderPerKey(t *testing.T) {
	const (
		messages   = 100_000
		submitters = 4
	)
	cases := []struct {
		name          string
		workers, keys int
		janitorEvery  time.Duration // 0: the default
	}{
		{"workers=1", 1, 1_000, 0},
		{"workers=2", 2, 1_000, 0},
		{"workers=8", 8, 1_000, 0},
		// Idle mailboxes reclaimed all the time, racing with their keys
		// coming back and with owners letting go.
		{"workers=2/janitor=50us", 2, 1_000, 50 * time.Microsecond},
		// Twenty times the keys: tables fill, so new keys make room by
		// reclaiming idle mailboxes.
		{"workers=2/keys=20000", 2, 20_000, 0},
	}
	for _, tc := range cases {
		workers, keys := tc.workers, tc.keys
		t.Run(tc.name, func(t *testing.T) {
			if tc.janitorEvery != 0 {
				setJanitorEvery(t, tc.janitorEvery)
			}
			e := New(Options{Workers: workers})
			g := e.Group(false)
			c := newOrderChecker(keys)
			names := make([]string, keys)
			for i := range names {
				names[i] = "agg-" + strconv.Itoa(i)
			}
			var wg sync.WaitGroup
			wg.Add(messages)
			var subs sync.WaitGroup
			for s := range submitters {
				subs.Add(1)
				go func() {
					defer subs.Done()
					rng := rand.New(rand.NewPCG(uint64(s), 42))
					seqs := make([]int64, keys)
					var bkeys []string
					var btasks []Task
					for i := 0; i < messages/submitters; i++ {
						key := rng.IntN(keys/submitters)*submitters + s // each key has one submitter
						task := &orderTask{c: c, key: key, seq: seqs[key], mode: rng.IntN(4), wg: &wg}
						seqs[key]++
						if s%2 == 0 { // half the submitters use batches of random sizes
							bkeys, btasks = append(bkeys, names[key]), append(btasks, task)
							if rng.IntN(100) < 2 || i == messages/submitters-1 {
								if _, err := g.SubmitBatch(bkeys, btasks); err != nil {
									c.fail(err)
								}
								bkeys, btasks = bkeys[:0], btasks[:0]
							}
							continue
						}
						if err := g.Submit(names[key], task); err != nil {
							c.fail(err)
						}
					}
				}()
			}
			subs.Wait()
			waitOrFail(t, &wg, 60*time.Second)
			select {
			case err := <-c.errs:
				t.Fatal(err)
			default:
			}
			var total int64
			for k := range keys {
				total += c.next[k].Load()
			}
			if total != messages {
				t.Fatalf("ran %d tasks, want %d", total, messages)
			}
			// Workers publish their counts every 64 turns and when they
			// park: the figures settle once the workers are idle.
			testwait.For(t, 10*time.Second, "mailboxes to drain and counts to settle", func() bool {
				st := e.Stats()
				return st.Mailboxes == 0 && st.Completed+st.Failed == messages
			})
			if st := e.Stats(); st.Submitted != messages || st.Failed == 0 {
				t.Fatalf("stats %+v", st)
			}
			closeOK(t, e)
		})
	}
}

func waitOrFail(t *testing.T, wg *sync.WaitGroup, d time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("tasks did not finish within %v", d)
	}
}

// gate holds the only worker busy until released, so tasks queue up.
func gate(t *testing.T, g *Group) (release func()) {
	started := make(chan struct{})
	ch := make(chan struct{})
	if err := g.Submit("gate", fn(func(Resume) Status { close(started); <-ch; return Done })); err != nil {
		t.Fatal(err)
	}
	<-started
	return func() { close(ch) }
}

func TestFairTurns(t *testing.T) {
	const throughput = 16
	e := New(Options{Workers: 1, Throughput: throughput})
	defer closeOK(t, e)
	g := e.Group(false)
	release := gate(t, g)

	var hotStarted atomic.Int64
	var hotBeforeCold int64 = -1
	var wg sync.WaitGroup
	wg.Add(10_001)
	hot := fn(func(Resume) Status { hotStarted.Add(1); wg.Done(); return Done })
	for range 10_000 {
		if err := g.Submit("hot", hot); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.Submit("cold", fn(func(Resume) Status { hotBeforeCold = hotStarted.Load(); wg.Done(); return Done })); err != nil {
		t.Fatal(err)
	}
	release()
	waitOrFail(t, &wg, 30*time.Second)
	if hotBeforeCold < 0 || hotBeforeCold > throughput {
		t.Fatalf("cold key started after %d hot messages, want at most %d", hotBeforeCold, throughput)
	}
}

// TestWaitingHoldsNoWorker: with one worker, key A's handler completes
// asynchronously, and only once 1,000 messages of other keys have finished.
// If waiting for A held the worker, they never would and the test times out.
func TestWaitingHoldsNoWorker(t *testing.T) {
	e := New(Options{Workers: 1})
	defer closeOK(t, e)
	g := e.Group(false)
	var aDone atomic.Bool
	release := make(chan struct{}) // closed when the other keys have finished
	aCompleted := make(chan struct{})
	if err := g.Submit("A", fn(func(r Resume) Status {
		go func() {
			<-release
			time.Sleep(50 * time.Millisecond) // A's second message must still wait
			aDone.Store(true)
			r.Complete(false)
			close(aCompleted)
		}()
		return Pending
	})); err != nil {
		t.Fatal(err)
	}
	var aNextStartedEarly atomic.Bool
	if err := g.Submit("A", fn(func(Resume) Status {
		if !aDone.Load() {
			aNextStartedEarly.Store(true)
		}
		return Done
	})); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1000)
	for i := range 1000 {
		if err := g.Submit("k"+strconv.Itoa(i), fn(func(Resume) Status {
			wg.Done()
			return Done
		})); err != nil {
			t.Fatal(err)
		}
	}
	waitOrFail(t, &wg, 10*time.Second)
	if e.Stats().Mailboxes == 0 {
		t.Fatal("A's mailbox is gone while its first message is pending")
	}
	close(release)
	<-aCompleted
	testwait.For(t, 10*time.Second, "A's second message", func() bool { return e.Stats().Mailboxes == 0 })
	if aNextStartedEarly.Load() {
		t.Fatal("A's second message started before its first completed")
	}
}

// TestNoHeadOfLineBehindStuckWorker: one key blocks a worker synchronously;
// other keys must not wait for it, whether they arrive while the turn is
// already long or at the moment it starts.
func TestNoHeadOfLineBehindStuckWorker(t *testing.T) {
	for _, waitForStuck := range []bool{true, false} {
		t.Run(fmt.Sprintf("arriveLate=%v", waitForStuck), func(t *testing.T) {
			e := New(Options{Workers: 2})
			defer closeOK(t, e)
			g := e.Group(false)
			started := make(chan struct{})
			release := make(chan struct{}) // closed when the other keys have finished
			defer close(release)
			if err := g.Submit("stuck", fn(func(Resume) Status {
				close(started)
				select { // a synchronous turn that lasts until the others are done
				case <-release:
				case <-time.After(20 * time.Second):
				}
				return Done
			})); err != nil {
				t.Fatal(err)
			}
			if waitForStuck {
				<-started
				time.Sleep(5 * time.Millisecond)
			}
			const n = 200
			var wg sync.WaitGroup
			wg.Add(n)
			var worst atomic.Int64
			for i := range n {
				submitted := time.Now()
				if err := g.Submit("k"+strconv.Itoa(i), fn(func(Resume) Status {
					d := int64(time.Since(submitted))
					for {
						w := worst.Load()
						if d <= w || worst.CompareAndSwap(w, d) {
							break
						}
					}
					wg.Done()
					return Done
				})); err != nil {
					t.Fatal(err)
				}
				if i%20 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
			// If the other keys waited for the stuck turn, they would not
			// finish until it timed out.
			waitOrFail(t, &wg, 10*time.Second)
			if w := time.Duration(worst.Load()); w > 100*time.Millisecond {
				t.Fatalf("slowest other key started %v after submission, want within 100ms", w)
			}
		})
	}
}

func TestBlockingGroupRunsOffTheWorkers(t *testing.T) {
	e := New(Options{Workers: 1, BlockingWorkers: 4})
	defer closeOK(t, e)
	blocking := e.Group(true)
	normal := e.Group(false)
	var conc, maxConc atomic.Int32
	release := make(chan struct{})
	var bwg sync.WaitGroup
	const keys, perKey = 8, 5
	bwg.Add(keys * perKey)
	c := newOrderChecker(keys)
	for k := range keys {
		for s := range perKey {
			if err := blocking.Submit("b"+strconv.Itoa(k), fn(func(Resume) Status {
				c.start(k, int64(s))
				n := conc.Add(1)
				for {
					m := maxConc.Load()
					if n <= m || maxConc.CompareAndSwap(m, n) {
						break
					}
				}
				<-release
				conc.Add(-1)
				c.end(k, int64(s))
				bwg.Done()
				return Done
			})); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The only worker is free although blocking tasks are stuck.
	var nwg sync.WaitGroup
	nwg.Add(100)
	for i := range 100 {
		if err := normal.Submit("n"+strconv.Itoa(i), fn(func(Resume) Status { nwg.Done(); return Done })); err != nil {
			t.Fatal(err)
		}
	}
	waitOrFail(t, &nwg, 10*time.Second)
	testwait.For(t, 10*time.Second, "the blocking pool to fill", func() bool { return conc.Load() == 4 })
	close(release)
	waitOrFail(t, &bwg, 10*time.Second)
	if m := maxConc.Load(); m != 4 {
		t.Fatalf("blocking tasks ran %d at once, want the pool size 4", m)
	}
	select {
	case err := <-c.errs:
		t.Fatal(err)
	default:
	}
}

func TestCloseWaitsForPendingWork(t *testing.T) {
	e := New(Options{Workers: 2})
	g := e.Group(false)
	var completed atomic.Bool
	if err := g.Submit("a", fn(func(r Resume) Status {
		time.AfterFunc(50*time.Millisecond, func() { completed.Store(true); r.Complete(false) })
		return Pending
	})); err != nil {
		t.Fatal(err)
	}
	var queuedRan atomic.Bool
	if err := g.Submit("a", fn(func(Resume) Status { queuedRan.Store(true); return Done })); err != nil {
		t.Fatal(err)
	}
	closeOK(t, e)
	if !completed.Load() || !queuedRan.Load() {
		t.Fatal("Close returned before pending and queued work finished")
	}
	if err := g.Submit("b", fn(func(Resume) Status { return Done })); !errors.Is(err, ErrClosed) {
		t.Fatalf("Submit after Close: %v, want ErrClosed", err)
	}
}

func TestCloseDeadlineAbandonsWork(t *testing.T) {
	e := New(Options{Workers: 1})
	g := e.Group(false)
	resume := make(chan Resume, 1)
	if err := g.Submit("a", fn(func(r Resume) Status { resume <- r; return Pending })); err != nil {
		t.Fatal(err)
	}
	var ranAfter atomic.Bool
	if err := g.Submit("a", fn(func(Resume) Status { ranAfter.Store(true); return Done })); err != nil {
		t.Fatal(err)
	}
	r := <-resume
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := e.Close(ctx)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close: %v, want a deadline error", err)
	}
	r.Complete(false) // late: must be ignored without running anything
	time.Sleep(10 * time.Millisecond)
	if ranAfter.Load() {
		t.Fatal("a task ran after Close gave up")
	}
}

func TestTopBacklogs(t *testing.T) {
	e := New(Options{Workers: 1})
	defer closeOK(t, e)
	g := e.Group(false)
	release := gate(t, g)
	noop := fn(func(Resume) Status { return Done })
	for i, n := range []int{5, 50, 20} {
		for range n {
			if err := g.Submit("k"+strconv.Itoa(i), noop); err != nil {
				t.Fatal(err)
			}
		}
	}
	other := e.Group(false)
	for range 100 {
		if err := other.Submit("k1", noop); err != nil { // another group's key, more backlogged
			t.Fatal(err)
		}
	}
	top := TopBacklogs(2, g)
	// The first task of each new mailbox is already on the owner's side.
	if len(top) != 2 || top[0].Key != "k1" || top[0].Tasks != 49 || top[1].Key != "k2" || top[0].Group != g.ID() {
		t.Fatalf("top backlogs %+v", top)
	}
	release()
	testwait.For(t, 10*time.Second, "drain", func() bool { return e.Stats().Mailboxes == 0 })
	if top := TopBacklogs(2, g, other); len(top) != 0 {
		t.Fatalf("backlogs after drain: %+v", top)
	}
}

func TestStatsLongestTurn(t *testing.T) {
	e := New(Options{Workers: 2})
	defer closeOK(t, e)
	g := e.Group(false)
	release := gate(t, g)
	// A turn's age counts from when it was first observed: by an earlier
	// Stats (a previous scrape) or an idle worker's check.
	e.Stats()
	time.Sleep(20 * time.Millisecond)
	st := e.Stats()
	release()
	if st.LongestTurn < 20*time.Millisecond || st.Workers != 2 || st.Mailboxes != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestAsyncCompletionRightAfterRelease: a task that completes on another
// goroutine the moment its runner lets go, after other tasks of its turn
// finished synchronously. The completion owns the mailbox from then on; the
// runner must have settled its turn before letting go (a runner settling
// late once left a mailbox claiming tasks it did not hold).
func TestAsyncCompletionRightAfterRelease(t *testing.T) {
	// Give the completion time to run before the runner goes on.
	testHookReleased = func() { time.Sleep(200 * time.Microsecond) }
	defer func() { testHookReleased = nil }()
	e := New(Options{Workers: 2})
	defer closeOK(t, e)
	g := e.Group(false)
	const keys, rounds = 200, 10
	names := make([]string, keys)
	for i := range names {
		names[i] = "k" + strconv.Itoa(i)
	}
	for range rounds {
		var wg sync.WaitGroup
		wg.Add(3 * keys)
		sync1 := fn(func(Resume) Status { wg.Done(); return Done })
		async := fn(func(r Resume) Status {
			go func() { wg.Done(); r.Complete(false) }()
			return Pending
		})
		// Per key: the activating task, then two taken from the mailbox
		// in one go, the second of which completes later.
		ks := make([]string, 0, 3*keys)
		ts := make([]Task, 0, 3*keys)
		for _, k := range names {
			ks, ts = append(ks, k, k, k), append(ts, sync1, sync1, async)
		}
		if _, err := g.SubmitBatch(ks, ts); err != nil {
			t.Fatal(err)
		}
		waitOrFail(t, &wg, 10*time.Second)
	}
	testwait.For(t, 10*time.Second, "mailboxes to drain", func() bool { return e.Stats().Mailboxes == 0 })
}

// QueuedMailboxes counts mailboxes placed on a worker that have not started
// their turn: not the one running, nor idle ones.
func TestStatsQueuedMailboxes(t *testing.T) {
	e := New(Options{Workers: 1, Throughput: 4})
	defer closeOK(t, e)
	g := e.Group(false)
	release := gate(t, g)
	var wg sync.WaitGroup
	task := fn(func(Resume) Status { wg.Done(); return Done })
	wg.Add(10 + 40)
	for i := range 10 {
		if err := g.Submit("k"+strconv.Itoa(i), task); err != nil {
			t.Fatal(err)
		}
	}
	for range 40 { // several full turns: requeued each time
		if err := g.Submit("hot", task); err != nil {
			t.Fatal(err)
		}
	}
	if st := e.Stats(); st.QueuedMailboxes != 11 || st.Mailboxes != 12 {
		t.Fatalf("behind the gate: %d queued, %d mailboxes; want 11 queued of 12", st.QueuedMailboxes, st.Mailboxes)
	}
	release()
	waitOrFail(t, &wg, 10*time.Second)
	testwait.For(t, 10*time.Second, "the queue to drain", func() bool { st := e.Stats(); return st.QueuedMailboxes == 0 && st.Mailboxes == 0 })
}

// Workers park and wake all the time when messages trickle in: every push
// onto a parking worker must either land before it parks or wake it.
func TestNoLostWakeups(t *testing.T) {
	e := New(Options{Workers: 4})
	defer closeOK(t, e)
	g := e.Group(false)
	const messages = 20_000
	var wg sync.WaitGroup
	wg.Add(messages)
	task := fn(func(Resume) Status { wg.Done(); return Done })
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range messages {
		if err := g.Submit("trickle-"+strconv.Itoa(i%97), task); err != nil {
			t.Fatal(err)
		}
		if i%64 == 0 {
			time.Sleep(time.Duration(rng.IntN(50)) * time.Microsecond) // let every worker park
		} else if i%4 == 0 {
			runtime.Gosched()
		}
	}
	// Each message is waited for with a deadline: a lost wakeup leaves one
	// stranded in a parked worker's inbox.
	waitOrFail(t, &wg, 10*time.Second)
}

// TestAgainRunsOnTheBlockingPool: more of a pending blocking task
// (Resume.Again: a retry after a wait) waits for a goroutine of the
// blocking pool, as tasks do, so the pool's bound holds for it too; the
// task stays pending until Complete, and its key's next task waits for it.
// For a task of another group, Again runs fn at once.
func TestAgainRunsOnTheBlockingPool(t *testing.T) {
	e := New(Options{Workers: 1, BlockingWorkers: 1})
	defer closeOK(t, e)
	blocking := e.Group(true)
	res, release := pendingBehindBusy(t, blocking)
	next := make(chan struct{})
	if err := blocking.Submit("a", fn(func(Resume) Status { close(next); return Done })); err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{})
	go res.Again(func() { close(ran) }, func() { t.Error("dropped while the pool runs") })
	select {
	case <-ran:
		t.Fatal("Again ran beside the pool's only goroutine, busy with another task")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("Again never ran once the pool was free")
	}
	select {
	case <-next:
		t.Fatal("the key's next task ran before its pending task completed")
	case <-time.After(50 * time.Millisecond):
	}
	res.Complete(false)
	select {
	case <-next:
	case <-time.After(10 * time.Second):
		t.Fatal("the key's next task never ran")
	}

	normal := e.Group(false)
	resumed := make(chan Resume, 1)
	if err := normal.Submit("c", fn(func(r Resume) Status { resumed <- r; return Pending })); err != nil {
		t.Fatal(err)
	}
	res = <-resumed
	here := false
	res.Again(func() { here = true }, func() { t.Error("dropped at once") })
	if !here {
		t.Fatal("Again of a non-blocking task did not run at once")
	}
	res.Complete(false)
}

// TestAgainDroppedAtClose: fn queued for the blocking pool when Close
// stops it (or given after) does not run; dropped does, so that whoever
// waits for fn hears of it.
func TestAgainDroppedAtClose(t *testing.T) {
	e := New(Options{Workers: 1, BlockingWorkers: 1})
	blocking := e.Group(true)
	res, release := pendingBehindBusy(t, blocking)
	dropped := make(chan struct{}, 2)
	res.Again(func() { t.Error("ran although the pool stopped first") }, func() { dropped <- struct{}{} })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = e.Close(ctx) // a and b are still pending: reported abandoned
	select {
	case <-dropped:
	case <-time.After(10 * time.Second):
		t.Fatal("queued fn neither ran nor was dropped at Close")
	}
	res.Again(func() { t.Error("ran after Close") }, func() { dropped <- struct{}{} })
	select {
	case <-dropped:
	default:
		t.Fatal("Again after Close did not drop at once")
	}
	close(release)
	testwait.For(t, 10*time.Second, "the pool's goroutine to return", func() bool { return e.blocking.live() == 0 })
}

// pendingBehindBusy submits to g, a blocking group of a pool of one, a task
// of key a that stays pending and returns its Resume, then a task of key b
// that keeps the pool's goroutine busy until release is closed.
func pendingBehindBusy(t *testing.T, g *Group) (Resume, chan struct{}) {
	t.Helper()
	resumed := make(chan Resume, 1)
	if err := g.Submit("a", fn(func(r Resume) Status { resumed <- r; return Pending })); err != nil {
		t.Fatal(err)
	}
	res := <-resumed
	release, busy := make(chan struct{}), make(chan struct{})
	if err := g.Submit("b", fn(func(Resume) Status { close(busy); <-release; return Done })); err != nil {
		t.Fatal(err)
	}
	<-busy
	return res, release
}

// A Resume kept past its task's completion (a retry scheduled late) still
// knows where its task runs: after its mailbox went idle and was reclaimed
// and reused for a key of a worker-run group, Again of a blocking task
// still waits for the blocking pool, instead of running fn at once on the
// caller's goroutine, beside the pool's bound.
func TestLateAgainOfABlockingTaskStaysOnThePool(t *testing.T) {
	setJanitorEvery(t, time.Hour) // the test runs the janitor's rounds
	e := New(Options{Workers: 1, BlockingWorkers: 1})
	defer closeOK(t, e)
	blocking, normal := e.Group(true), e.Group(false)
	got := make(chan Resume, 1)
	if err := blocking.Submit("a", fn(func(r Resume) Status { got <- r; return Pending })); err != nil {
		t.Fatal(err)
	}
	old := <-got
	old.Complete(false)
	testwait.For(t, 10*time.Second, "a's mailbox to go idle", func() bool { return e.Stats().Mailboxes == 0 })
	mb := lookup(blocking, "a")
	e.reclaimIdle()
	e.reclaimIdle() // idle for a whole round: pooled
	shard := mb.hash & e.shardMask
	inShard := func(g *Group, prefix string, same bool) string {
		for i := 0; ; i++ {
			key := prefix + strconv.Itoa(i)
			if (e.hashKey(g.id, g.blocking, key)&e.shardMask == shard) == same {
				return key
			}
		}
	}
	// Keep the pool's only goroutine busy, with a key of another shard (a
	// new key of a's shard would take a's pooled mailbox).
	busy, release := make(chan struct{}), make(chan struct{})
	if err := blocking.Submit(inShard(blocking, "busy", false), fn(func(Resume) Status { close(busy); <-release; return Done })); err != nil {
		t.Fatal(err)
	}
	<-busy
	key := inShard(normal, "b", true)
	if err := normal.Submit(key, fn(func(Resume) Status { return Done })); err != nil {
		t.Fatal(err)
	}
	if lookup(normal, key) != mb {
		close(release)
		t.Fatalf("the new key %q did not reuse a's pooled mailbox: the test needs it to", key)
	}
	if !old.Blocking() {
		t.Error("Blocking of a blocking task's Resume reports false once its mailbox serves a worker-run group")
	}
	ran := make(chan struct{})
	old.Again(func() { close(ran) }, func() { t.Error("dropped while the pool runs") })
	select {
	case <-ran:
		t.Error("a blocking task's late Again ran fn on the caller's goroutine, beside the pool's only goroutine, busy with another task")
	default:
	}
	close(release)
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("Again never ran once the pool was free")
	}
}
