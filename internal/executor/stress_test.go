package executor

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// shapeTask checks order, exclusivity and exactly-once per key, finishing
// in one of the ways a task can: Done, Failed, Pending completed before Run
// returns, Pending completed at once from another goroutine (racing the
// release), Pending completed a little later, and Again (on the blocking
// pool for blocking groups) then Complete.
type shapeTask struct {
	c     *orderChecker
	key   int
	seq   int64
	shape int
	wg    *sync.WaitGroup
	ran   atomic.Int32
}

const taskShapes = 6

func (t *shapeTask) Run(r Resume) Status {
	if t.ran.Add(1) != 1 {
		t.c.fail(fmt.Errorf("key %d: task %d ran twice", t.key, t.seq))
	}
	t.c.start(t.key, t.seq)
	finish := func() {
		t.c.end(t.key, t.seq)
		t.wg.Done()
	}
	switch t.shape {
	case 0:
		finish()
		return Done
	case 1:
		finish()
		return Failed
	case 2:
		finish()
		r.Complete(false)
		return Pending
	case 3:
		go func() { finish(); r.Complete(t.seq%5 == 0) }()
		return Pending
	case 4:
		go func() {
			time.Sleep(time.Duration(rand.IntN(50)) * time.Microsecond)
			finish()
			r.Complete(false)
		}()
		return Pending
	default:
		go r.Again(func() { finish(); r.Complete(false) }, func() { t.c.fail(errors.New("Again dropped before Close")) })
		return Pending
	}
}

// Everything at once, to catch what the focused tests miss: worker-run and
// blocking groups, turns of two tasks, a janitor sweeping all the time,
// every way a task finishes, Submit and SubmitBatch, keys going idle and
// coming back, scrapers (Stats, TopBacklogs, HotKeys, Busy) racing it all,
// and with keys sharing mailboxes through hash collisions too. Each key's
// tasks run once, one at a time, in order; Close drains; the counts add up.
func TestStressKeysRunOnceInOrder(t *testing.T) {
	for _, collide := range []bool{false, true} {
		t.Run("collide="+strconv.FormatBool(collide), func(t *testing.T) {
			if collide {
				defer func(h func(maphash.Seed, string) uint64) { hashString = h }(hashString)
				hashString = func(_ maphash.Seed, s string) uint64 { return uint64(s[len(s)-1]) * 0x100000001 }
			}
			setJanitorEvery(t, 20*time.Microsecond)
			const keys, submitters, messages = 2000, 4, 100_000
			e := New(Options{Workers: 3, Throughput: 2, BlockingWorkers: 3})
			groups := [2]*Group{e.Group(false), e.Group(true)}
			c := newOrderChecker(keys)
			names := make([]string, keys)
			for i := range names {
				names[i] = "k" + strconv.Itoa(i)
			}
			stop := make(chan struct{})
			var scraper sync.WaitGroup
			scraper.Add(1)
			go func() {
				defer scraper.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					_ = e.Stats()
					_ = TopBacklogs(5, groups[:]...)
					_ = HotKeys(5, groups[:]...)
					_ = e.Busy()
				}
			}()
			var wg sync.WaitGroup
			wg.Add(messages)
			var subs sync.WaitGroup
			for s := range submitters {
				subs.Add(1)
				go func() {
					defer subs.Done()
					rng := rand.New(rand.NewPCG(uint64(s), 9))
					seqs := make([]int64, keys)
					var bk []string
					var bt []Task
					submit := func(g *Group, key int, task Task) {
						if err := g.Submit(names[key], task); err != nil {
							c.fail(err)
						}
					}
					for range messages / submitters {
						// Each key has one submitter; odd keys are blocking.
						key := rng.IntN(keys/submitters)*submitters + s
						g := groups[key%2]
						task := &shapeTask{c: c, key: key, seq: seqs[key], shape: rng.IntN(taskShapes), wg: &wg}
						seqs[key]++
						switch {
						case s%2 == 1:
							submit(g, key, task)
							if rng.IntN(1000) == 0 {
								time.Sleep(time.Millisecond) // let keys go idle
							}
						case key%2 == 1:
							submit(g, key, task) // batches hold the worker-run group's keys only
						default:
							bk, bt = append(bk, names[key]), append(bt, task)
							if rng.IntN(50) == 0 {
								if _, err := g.SubmitBatch(bk, bt); err != nil {
									c.fail(err)
								}
								bk, bt = bk[:0], bt[:0]
							}
						}
					}
					if len(bk) > 0 {
						if _, err := groups[0].SubmitBatch(bk, bt); err != nil {
							c.fail(err)
						}
					}
				}()
			}
			subs.Wait()
			waitOrFail(t, &wg, 60*time.Second)
			close(stop)
			scraper.Wait()
			select {
			case err := <-c.errs:
				t.Fatal(err)
			default:
			}
			closeOK(t, e)
			if st := e.Stats(); st.Mailboxes != 0 || st.Submitted != messages || st.Completed+st.Failed != messages {
				t.Fatalf("Stats after Close: %+v; want no mailbox, %d tasks submitted and finished", st, messages)
			}
		})
	}
}
