package executor

import (
	"sync"
	"sync/atomic"
	"time"
)

// shard is one part of the mailbox table. Shards are three cache lines:
// what every submission touches, what only some do, and what completions
// away from a worker count.
type shard struct {
	mu        sync.Mutex // guards m, free, closed, gen, activated, submitted, scratch, hot and every mailbox's in and gen
	m         table
	activated uint64 // mailboxes that went from empty to holding tasks
	submitted uint64 // tasks submitted
	gen       uint32 // sweeps by the janitor so far
	closed    bool

	free           []*mailbox
	scratch        []*mailbox // reused by sweep
	hot            *hotSet    // candidates for HotKeys (status.go); nil until the first; guarded by mu
	_              [8]byte
	emptied        atomic.Uint64 // mailboxes emptied away from a worker turn
	asyncCompleted atomic.Uint64 // tasks finished successfully away from a worker turn: Pending tasks completed, blocking-pool tasks that returned Done
	asyncFailed    atomic.Uint64 // tasks that failed away from a worker turn: Pending tasks completed with failure, blocking-pool tasks that returned Failed
	resumed        atomic.Uint64 // mailboxes placed again after a task finished away from a worker turn
	_              [32]byte
}

// minFree is how many reclaimed mailboxes a shard keeps for new keys at
// least; it keeps up to as many as its table can hold (half its slots), so a
// stream of new keys reuses the mailboxes its sweeps reclaim.
const minFree = 32

// freeCap is how many mailboxes a shard with a table of size slots pools.
func freeCap(size int) int { return max(minFree, size/2) }

// take returns a pooled or new mailbox. Called with sh.mu held.
func (sh *shard) take() *mailbox {
	if n := len(sh.free); n > 0 {
		mb := sh.free[n-1]
		sh.free[n-1] = nil
		sh.free = sh.free[:n-1]
		return mb
	}
	return &mailbox{}
}

// insert adds a new mailbox to the table. When the table is half full it
// first reclaims the idle mailboxes, and grows only if what remains (the
// active ones, and any reactivated meanwhile) fills a quarter of it: the
// table stays at most twice as large as it needs to be for the mailboxes
// active at its peak, and idle mailboxes of keys that come back are reused
// as they are. Called with sh.mu held.
func (sh *shard) insert(mb *mailbox) {
	if sh.m.full() {
		sh.sweep(false)
		if 4*(sh.m.n+1) > len(sh.m.slots) {
			sh.m.resize(2 * len(sh.m.slots))
		}
	}
	sh.m.put(mb)
}

// sweep removes idle mailboxes from the table and pools them. With recent
// set it spares the ones activated since the previous janitor sweep. Called
// with sh.mu held: no mailbox can become active meanwhile, since only a
// submitter holding it raises pending from zero, and an idle mailbox is
// touched by nobody else.
func (sh *shard) sweep(spareRecent bool) {
	keep := sh.scratch[:0]
	pool := freeCap(len(sh.m.slots))
	sh.m.each(func(mb *mailbox) {
		if mb.pending.Load() != 0 || (spareRecent && mb.gen == sh.gen) {
			keep = append(keep, mb)
			return
		}
		if cap(mb.local) > 1024 {
			mb.local = nil
		}
		if cap(mb.in) > 1024 {
			mb.in = nil
		}
		mb.id = ""
		if len(sh.free) < pool {
			sh.free = append(sh.free, mb)
		}
	})
	if len(keep) == sh.m.n {
		sh.scratch = keep[:0]
		return
	}
	size := len(sh.m.slots)
	if spareRecent {
		// Give back what a past burst needed: halve the table while it
		// would be less than an eighth full, and pool what it can hold.
		for size > 16 && 8*len(keep) < size {
			size /= 2
		}
		if n := freeCap(size); len(sh.free) > n {
			clear(sh.free[n:])
			sh.free = sh.free[:n:n]
		}
	}
	sh.m.rebuild(size, keep)
	clear(keep)
	sh.scratch = keep[:0]
	if spareRecent && cap(sh.scratch) > size {
		sh.scratch = nil
	}
}

// janitorEvery is how often the janitor reclaims mailboxes idle since its
// previous round. A variable so tests can make it race with everything else.
var janitorEvery = time.Second

// janitor reclaims idle mailboxes and oversized tables of quiet shards, so
// memory taken by a burst of keys is given back even if no new key comes to
// make room. It stops with the executor.
func (e *Executor) janitor() {
	defer close(e.janitorDone)
	t := time.NewTicker(janitorEvery)
	defer t.Stop()
	for {
		select {
		case <-e.stopCh:
			return
		case <-t.C:
			e.reclaimIdle()
		}
	}
}

// reclaimIdle is a janitor round: every shard drops the mailboxes that stayed
// idle since the previous round.
func (e *Executor) reclaimIdle() {
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		sh.sweep(true)
		sh.gen++
		sh.mu.Unlock()
	}
}
