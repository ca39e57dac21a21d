package executor

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wowd/wowd/internal/testwait"
)

// Close while submitters keep submitting, to worker-run and blocking groups,
// with tasks completing synchronously and asynchronously: every task whose
// Submit succeeded runs exactly once and in its key's order before Close
// returns, every other Submit fails with ErrClosed, and nothing runs after.
func TestCloseRacingSubmitters(t *testing.T) {
	for round := range 5 {
		t.Run("round="+strconv.Itoa(round), func(t *testing.T) {
			const keys, submitters = 400, 4
			e := New(Options{Workers: 2, BlockingWorkers: 4})
			groups := [2]*Group{e.Group(false), e.Group(true)}
			c := newOrderChecker(keys)
			names := make([]string, keys)
			for i := range names {
				names[i] = "agg-" + strconv.Itoa(i)
			}
			var (
				wg       sync.WaitGroup // tasks submitted and not yet finished
				subs     sync.WaitGroup
				accepted atomic.Int64
			)
			for s := range submitters {
				subs.Add(1)
				go func() {
					defer subs.Done()
					rng := rand.New(rand.NewPCG(uint64(round), uint64(s)))
					seqs := make([]int64, keys)
					for {
						// Each key has one submitter; odd keys are blocking.
						key := rng.IntN(keys/submitters)*submitters + s
						g := groups[key%2]
						n := 1 + rng.IntN(8)
						if s%2 == 1 {
							n = 1 // these use Submit
						}
						ks, ts := make([]string, n), make([]Task, n)
						for i := range n {
							ks[i] = names[key]
							ts[i] = &orderTask{c: c, key: key, seq: seqs[key], mode: rng.IntN(4), wg: &wg}
							seqs[key]++
						}
						wg.Add(n)
						var ok int
						var err error
						if s%2 == 1 {
							if err = g.Submit(ks[0], ts[0]); err == nil {
								ok = 1
							}
						} else {
							ok, err = g.SubmitBatch(ks, ts)
						}
						accepted.Add(int64(ok))
						wg.Add(-(n - ok)) // rejected: never run
						if err != nil {
							if !errors.Is(err, ErrClosed) {
								c.fail(err)
							}
							return
						}
					}
				}()
			}
			time.Sleep(time.Duration(5+rand.IntN(20)) * time.Millisecond)
			closeOK(t, e)
			var ranAtClose int64
			for k := range keys {
				ranAtClose += c.next[k].Load()
			}
			subs.Wait()
			waitOrFail(t, &wg, time.Second) // all accepted tasks finished by Close
			select {
			case err := <-c.errs:
				t.Fatal(err)
			default:
			}
			if a := accepted.Load(); a == 0 || ranAtClose != a {
				t.Fatalf("%d tasks accepted, %d ran by the time Close returned", a, ranAtClose)
			}
			time.Sleep(10 * time.Millisecond)
			var ran int64
			for k := range keys {
				ran += c.next[k].Load()
			}
			if ran != ranAtClose {
				t.Fatalf("%d tasks ran after Close returned", ran-ranAtClose)
			}
		})
	}
}

// TestCloseSeesTheLastMailboxGoIdle checks that Close returns once the last
// mailbox goes idle, not at its deadline: the idle mailbox must be counted
// before Close is told to look again. A task finishing on a worker and one
// completed asynchronously (resume) are the two ways a mailbox empties.
func TestCloseSeesTheLastMailboxGoIdle(t *testing.T) {
	for _, async := range []bool{false, true} {
		name := map[bool]string{false: "on a worker", true: "completed asynchronously"}[async]
		t.Run(name, func(t *testing.T) {
			for i := range 3000 {
				e := New(Options{Workers: 8})
				g := e.Group(false)
				release := make(chan struct{})
				if err := g.Submit("a", fn(func(r Resume) Status {
					if async {
						go func() { <-release; r.Complete(false) }()
						return Pending
					}
					<-release
					return Done
				})); err != nil {
					t.Fatal(err)
				}
				time.AfterFunc(200*time.Microsecond, func() { close(release) })
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				start := time.Now()
				err := e.Close(ctx)
				cancel()
				if err != nil {
					t.Fatalf("iteration %d: %v", i, err)
				}
				// Far below the deadline, far above a busy machine's delay.
				if d := time.Since(start); d > time.Second {
					t.Fatalf("iteration %d: Close took %v after its last task finished at once: it missed the mailbox going idle", i, d)
				}
			}
		})
	}
}

// Once Close has given up on the work left (its context ended while a task
// of key a ran, with more of a queued), no further task starts: not the
// rest of the running turn, whichever way the running task ends, and not
// on the blocking pool. The key keeps its queued tasks: Close reports its
// mailbox abandoned, and Stats still counts it, with the one task that
// finished.
func TestNothingStartsAfterCloseGaveUp(t *testing.T) {
	for _, tc := range []struct {
		name     string
		blocking bool
		status   Status
	}{
		{"on a worker", false, Done},
		{"on a worker, completed before returning Pending", false, Pending},
		{"on the blocking pool", true, Done},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := New(Options{Workers: 1, Throughput: 16, BlockingWorkers: 1})
			g := e.Group(tc.blocking)
			var started atomic.Int32
			running, release := make(chan struct{}), make(chan struct{})
			if err := g.Submit("a", fn(func(r Resume) Status {
				started.Add(1)
				close(running)
				<-release
				if tc.status == Pending {
					r.Complete(false)
				}
				return tc.status
			})); err != nil {
				t.Fatal(err)
			}
			for range 7 { // fewer than Throughput: the turn could run them all
				if err := g.Submit("a", fn(func(Resume) Status { started.Add(1); return Done })); err != nil {
					t.Fatal(err)
				}
			}
			<-running
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // Close gives up on a at once, and waits a moment for the goroutine in its task
			err := e.Close(ctx)
			close(release)
			testwait.For(t, 10*time.Second, "the workers and the blocking pool's goroutines to return", func() bool {
				return e.live.Load() == 0 && e.blocking.live() == 0
			})
			if n := started.Load(); n != 1 {
				t.Errorf("%d tasks of the abandoned key started after Close gave up", n-1)
			}
			if err == nil || !strings.Contains(err.Error(), "1 mailboxes abandoned") {
				t.Errorf("Close: %v, want a's mailbox reported abandoned", err)
			}
			if st := e.Stats(); st.Mailboxes != 1 || st.Completed != 1 || st.Failed != 0 {
				t.Errorf("Stats once every goroutine returned: %d mailboxes, %d completed, %d failed; want a's mailbox still holding tasks and its one task completed", st.Mailboxes, st.Completed, st.Failed)
			}
		})
	}
}

// Close runs once; every call returns its result. A second Close after one
// that gave up on work reports that failure, not success.
func TestCloseAgainReportsTheFirstOutcome(t *testing.T) {
	e := New(Options{Workers: 1})
	g := e.Group(false)
	res := make(chan Resume, 1)
	if err := g.Submit("a", fn(func(r Resume) Status { res <- r; return Pending })); err != nil {
		t.Fatal(err)
	}
	r := <-res
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	first := e.Close(ctx)
	if first == nil {
		t.Fatal("Close gave up on a pending task and returned nil")
	}
	r.Complete(false) // late: ignored
	again := make(chan error, 2)
	for range 2 {
		go func() { again <- e.Close(context.Background()) }()
	}
	for range 2 {
		if err := <-again; err != first {
			t.Fatalf("Close after one that returned %q: %v, want the same", first, err)
		}
	}

	e = New(Options{Workers: 1})
	closeOK(t, e)
	closeOK(t, e)
}
