// Package executor runs tasks keyed by aggregate ID on a small shared set of
// workers: tasks of one key run one at a time in submission order, tasks of
// different keys run in parallel. It knows nothing of Kafka.
//
// # Model
//
// A mailbox holds the tasks of one (group, key). It counts its pending tasks
// (submitted, not finished): the Submit that raises the count from zero
// activates it and places it on a worker; the owner whose finished tasks
// bring it back to zero lets go of it, touching nothing else. An idle
// mailbox holds no task and counts for nothing; it stays in its shard's
// table, so a key that comes back soon finds it as it was, until the shard
// needs room for a new key or the janitor finds it idle for a second round
// (about one to two seconds); reclaimed mailboxes are pooled. Between
// activation and emptying a mailbox is owned by exactly one party: a worker's
// queue, the worker running its turn, a task that completes asynchronously,
// or the blocking pool. Submitters never schedule an active mailbox; they
// append to it under the shard lock, one lock per submission.
//
// A turn runs at most Throughput tasks that complete synchronously, then the
// mailbox goes to the back of its worker's queue. A task that returns Pending
// releases the worker at once; its Resume.Complete puts the mailbox back on a
// worker. Groups declared blocking run their tasks on a bounded pool of
// goroutines set aside for blocking work, never on a worker.
//
// # Placement and stealing
//
// A worker's queue is, oldest first, a run queue (filled by the worker,
// taken from by anyone with a CAS, like the Go scheduler's per-P queue), a
// spill for what did not fit, and an inbox: a stack that placement pushes a
// mailbox onto with one CAS and that the worker takes whole with another,
// reversing it into its run queue. The inbox word also says when the worker
// is parked, so a push and a worker going to sleep cannot miss each other.
// A mailbox that becomes runnable goes to a running worker with an empty
// inbox that is not stuck in a long turn, else to a parked worker (woken),
// else to a worker not stuck, counting from one its hash chooses. An idle
// worker steals the oldest queued (not running) mailbox of another worker,
// taking along the rest of that worker's inbox, before it parks; while
// another worker is in a turn it parks with a timeout, marking workers whose
// turn has run long as stuck, so a mailbox queued behind a turn that later
// runs long is still picked up and new ones avoid that worker. A mailbox is
// only ever in one place, so stealing cannot reorder a key.
//
// # Locks
//
// shard.mu guards a shard's table, free list, counters and every mailbox's
// incoming slice and generation. worker.spillMu guards a worker's spill.
// worker.obsMu guards a worker's turn observation. blockingPool.mu guards
// the blocking pool's queue and counts. No code holds two of these locks at
// once, so there is no lock order to respect.
//
// # Goroutines
//
// The Executor owns its workers (one goroutine each, started by New), the
// janitor (one goroutine, started by New) and the blocking pool's goroutines
// (started on demand up to the pool size). Close stops all of them.
package executor

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is returned by Submit once Close has begun.
var ErrClosed = errors.New("executor closed")

// Status is what Task.Run reports.
type Status uint8

const (
	// Done means the task completed successfully before Run returned.
	Done Status = iota
	// Failed means the task completed with a failure before Run returned.
	Failed
	// Pending means the task completes later: the callee calls
	// Resume.Complete exactly once, from any goroutine, possibly even before
	// Run returns.
	Pending
)

// Task is one unit of work for a key.
type Task interface {
	Run(r Resume) Status
}

// Resume completes a task that returned Pending.
type Resume struct {
	mb *mailbox
	ex *Executor
}

// Complete reports that the pending task finished. It must be called exactly
// once per Pending task. The key's next task may start before Complete
// returns.
func (r Resume) Complete(failed bool) { r.ex.complete(r.mb, failed) }

// Options configure an Executor.
type Options struct {
	// Workers is the number of workers; 0 means GOMAXPROCS.
	Workers int
	// Throughput is the most tasks a mailbox runs in one turn while they
	// complete synchronously; 0 means 16.
	Throughput int
	// BlockingWorkers bounds the goroutines running tasks of blocking
	// groups; 0 means 64.
	BlockingWorkers int
}

// testHookReleased, when set by a test before New, runs in a worker right
// after it let go of a mailbox whose task completes later.
var testHookReleased func()

// longTurn is how long a turn may run before placement avoids its worker and
// idle workers steal what is queued behind it.
const longTurn = 100 * time.Microsecond

// Executor runs keyed tasks. Build it with New and stop it with Close.
type Executor struct {
	workers    []*worker
	shards     []shard
	shardMask  uint64
	seed       maphash.Seed
	throughput int
	blocking   blockingPool

	groupMu sync.Mutex // guards groups
	groups  uint32

	closeOnce   sync.Once
	stopping    atomic.Bool   // workers exit after their current turn
	stopCh      chan struct{} // closed with stopping set: wakes parked workers, stops the janitor
	janitorDone chan struct{} // closed when the janitor returns
	live        atomic.Int32  // workers not yet returned
}

// New starts an executor with its workers.
func New(o Options) *Executor {
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.Throughput <= 0 {
		o.Throughput = 16
	}
	if o.BlockingWorkers <= 0 {
		o.BlockingWorkers = 64
	}
	nshards := 64
	for nshards < 16*o.Workers {
		nshards *= 2
	}
	e := &Executor{
		shards:      make([]shard, nshards),
		shardMask:   uint64(nshards - 1),
		seed:        maphash.MakeSeed(),
		throughput:  o.Throughput,
		stopCh:      make(chan struct{}),
		janitorDone: make(chan struct{}),
	}
	e.blocking.init(e, o.BlockingWorkers)
	e.workers = make([]*worker, o.Workers)
	for i := range e.workers {
		w := &worker{ex: e, id: i, wake: make(chan struct{}, 1)}
		e.workers[i] = w
	}
	e.live.Store(int32(len(e.workers)))
	for _, w := range e.workers {
		go w.loop()
	}
	go e.janitor()
	return e
}

// Group is a namespace of keys, typically one per dispatcher and aggregate
// type: equal keys of different groups are different mailboxes.
type Group struct {
	ex       *Executor
	id       uint32
	blocking bool
}

// Group returns a new group. Tasks of a blocking group run on the bounded
// blocking pool instead of a worker.
func (e *Executor) Group(blocking bool) *Group {
	e.groupMu.Lock()
	defer e.groupMu.Unlock()
	e.groups++
	return &Group{ex: e, id: e.groups, blocking: blocking}
}

// Submit queues t behind the tasks already submitted for key in g. It never
// blocks; the caller bounds how much it submits. After Close has begun it
// returns ErrClosed.
func (g *Group) Submit(key string, t Task) error {
	mb, activated, err := g.enqueue(key, t)
	if activated {
		g.ex.place(mb)
	}
	return err
}

// SubmitBatch submits tasks[i] for keys[i], in order, as Submit would one
// by one, and places the mailboxes it activates together: one lock per
// worker for the batch instead of one per mailbox. It stops at the first
// error (ErrClosed) and returns how many were submitted.
func (g *Group) SubmitBatch(keys []string, tasks []Task) (int, error) {
	var buf [64]*mailbox
	active := buf[:0]
	for i, key := range keys {
		mb, activated, err := g.enqueue(key, tasks[i])
		if err != nil {
			g.ex.placeAll(active)
			return i, err
		}
		if activated {
			if active = append(active, mb); len(active) == cap(buf) {
				g.ex.placeAll(active)
				active = active[:0]
			}
		}
	}
	g.ex.placeAll(active)
	return len(keys), nil
}

// enqueue adds t to its key's mailbox and reports whether that activated
// the mailbox, which the caller must then place.
func (g *Group) enqueue(key string, t Task) (*mailbox, bool, error) {
	e := g.ex
	h := e.hashKey(g.id, g.blocking, key)
	sh := &e.shards[h&e.shardMask]
	sh.mu.Lock()
	if sh.closed {
		sh.mu.Unlock()
		return nil, false, ErrClosed
	}
	sh.admitted++
	mb := sh.m.get(h)
	if mb == nil {
		mb = sh.take()
		mb.group, mb.id, mb.hash = g.id, key, h
		sh.insert(mb)
	}
	if mb.pending.Add(1) > 1 {
		mb.in = append(mb.in, t) // its owner will take it
		sh.mu.Unlock()
		return mb, false, nil
	}
	// The mailbox was empty: nobody owns it, so its first task goes
	// straight to the owner's side, inline: the first turn needs no lock
	// and reads no other memory.
	mb.head = t
	if mb.gen != sh.gen {
		mb.gen = sh.gen
	}
	sh.activated++
	sh.mu.Unlock()
	return mb, true, nil
}

// hashString hashes keys; a variable so a test can make keys collide.
var hashString = maphash.String

// hashKey hashes a key of a group. The hash identifies the key's mailbox:
// its low bits choose the shard, and its top bit is set for blocking groups.
//
// Two keys with equal hashes (of one group or of two) would share a
// mailbox. That keeps every guarantee (each key's tasks run once, one at a
// time, in order) and costs only parallelism between those two keys while
// both are active; with a 64-bit seeded hash it takes about 2^32 keys held
// at once (active, or idle and kept) to make it likely. In exchange a
// submission identifies a mailbox from the table slot alone, without
// reading the mailbox's key: the mailbox's first cache line is taken once,
// for writing. The top bit keeps tasks of blocking
// groups from ever sharing a mailbox with tasks that run on a worker.
func (e *Executor) hashKey(group uint32, blocking bool, key string) uint64 {
	h := hashString(e.seed, key) ^ (uint64(group) * 0x9E3779B97F4A7C15)
	h &^= 1 << 63
	if blocking {
		h |= 1 << 63
	}
	return h
}

// shard is one part of the mailbox table. Shards are three cache lines:
// what every submission touches, what only some do, and what completions
// away from a worker count.
type shard struct {
	mu        sync.Mutex // guards m, free, closed, gen, activated, admitted, scratch and every mailbox's in and gen
	m         table
	activated uint64 // mailboxes that went from empty to holding tasks
	admitted  uint64 // tasks submitted
	gen       uint32 // sweeps by the janitor so far
	closed    bool

	free           []*mailbox
	scratch        []*mailbox // reused by sweep
	_              [16]byte
	emptied        atomic.Uint64 // mailboxes emptied away from a worker turn
	asyncCompleted atomic.Uint64 // Pending tasks completed successfully
	asyncFailed    atomic.Uint64 // Pending tasks completed with failure
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

// mailbox holds the tasks of one key.
//
// pending counts the tasks submitted and not finished. The submitter that
// raises it from 0 owns the mailbox and places it on a worker; the owner that
// brings it back to 0 lets go without a lock and does not touch it again: it
// stays in the table, idle, until reactivated or swept.
// Between those, exactly one party owns it: a worker's queue, a worker's turn,
// a pending task's completion, or the blocking pool.
type mailbox struct {
	// Line 0: everything a submission finding the mailbox touches, and a
	// turn of one task, so a mailbox crosses between a submitter's core and
	// a worker's as one cache line. (Mailboxes are 128 bytes: the allocator
	// puts them on 128-byte boundaries; layout_test.go checks the offsets.)
	pending atomic.Int64
	head    Task     // owned by the current owner: the task that activated the mailbox, run first
	hash    uint64   // identifies the mailbox (see hashKey); fixed while in the table
	next    *mailbox // next older mailbox in a worker's inbox; written by the pusher
	li      uint32   // owned by the current owner: local[li:] are still to run
	// phase settles the race between a task returning Pending and its
	// completion: 0 while running, 1 once the runner released the mailbox,
	// 2 (or 3, failed) if the completion came first.
	phase atomic.Uint32
	gen   uint32 // shard.gen at its last activation; guarded by shard.mu
	group uint32 // fixed while in the table
	_     [8]byte

	// Line 1: batches of tasks, and the key for reports.
	local []Task // owned by the current owner: tasks taken from in
	in    []Task // appended by submitters; guarded by shard.mu
	id    string // the key of the first submission; fixed while in the table
}

// blocking reports whether mb's tasks run on the blocking pool.
func (mb *mailbox) blocking() bool { return mb.hash>>63 == 1 }

// shardOf returns the shard whose table holds mb.
func (e *Executor) shardOf(mb *mailbox) *shard { return &e.shards[mb.hash&e.shardMask] }

// settle accounts for finished tasks of the current owner with local
// exhausted. It reports false if that emptied the mailbox (the owner must let
// go and not touch it again), else it moves the incoming tasks to the owner's
// side.
func (e *Executor) settle(mb *mailbox, finished int64) bool {
	sh := e.shardOf(mb) // found before letting go: a submitter may reuse mb at once
	if mb.li != 0 {
		mb.local = mb.local[:0] // every slot was cleared as its task was taken
		mb.li = 0
	}
	if finished > 0 && mb.pending.Add(-finished) == 0 {
		return false // idle: it stays in the table until swept or reactivated
	}
	sh.mu.Lock()
	mb.local, mb.in = mb.in, mb.local
	sh.mu.Unlock()
	return true
}

// complete handles Resume.Complete.
func (e *Executor) complete(mb *mailbox, failed bool) {
	early := uint32(2)
	if failed {
		early = 3
	}
	if mb.phase.CompareAndSwap(0, early) {
		return // the runner has not let go yet; it continues the mailbox
	}
	mb.phase.Store(0)
	if failed {
		e.shardOf(mb).asyncFailed.Add(1)
	} else {
		e.shardOf(mb).asyncCompleted.Add(1)
	}
	e.resume(mb)
}

// released is called by a runner whose task returned Pending. It reports
// whether the mailbox is now waiting for its completion (the runner must let
// go), or the completion already happened (the runner continues; failed is
// its outcome).
func (mb *mailbox) released() (waiting, failed bool) {
	if mb.phase.CompareAndSwap(0, 1) {
		return true, false
	}
	failed = mb.phase.Load() == 3
	mb.phase.Store(0)
	return false, failed
}

// resume continues a mailbox after one task finished away from a worker turn
// (an asynchronous completion, or the blocking pool): back on a worker if it
// has tasks, else let go.
func (e *Executor) resume(mb *mailbox) {
	sh := e.shardOf(mb)
	if mb.head != nil || int(mb.li) < len(mb.local) {
		mb.pending.Add(-1) // tasks remain on the owner's side: not empty
		sh.resumed.Add(1)
		e.place(mb)
		return
	}
	if e.settle(mb, 1) {
		sh.resumed.Add(1)
		e.place(mb)
	} else {
		sh.emptied.Add(1)
	}
}

// turn runs up to throughput tasks of mb, which w owns.
func (w *worker) turn(mb *mailbox) {
	e := w.ex
	w.turnCount++
	w.turnSeq.Store(w.turnCount) // odd: in a turn
	if w.stuck.Load() {
		w.stuck.Store(false)
	}
	var done, failed, finished int64 // finished: not yet taken off mb.pending
	for n := 0; ; {
		if mb.head == nil && int(mb.li) == len(mb.local) {
			if !e.settle(mb, finished) {
				w.local.emptied++
				break // emptied and let go
			}
			finished = 0
		}
		if n == e.throughput {
			mb.pending.Add(-finished) // tasks remain: cannot empty it
			w.requeued.Add(1)
			w.push(mb) // back of the queue: fair to the other mailboxes
			break
		}
		var t Task
		if t = mb.head; t != nil {
			mb.head = nil
		} else {
			t = mb.local[mb.li]
			mb.local[mb.li] = nil
			mb.li++
		}
		n++
		if mb.blocking() {
			mb.pending.Add(-finished) // t is still pending: cannot empty it
			e.blocking.submit(t, mb)
			break
		}
		switch t.Run(Resume{mb, e}) {
		case Done:
			done++
			finished++
			continue
		case Failed:
			failed++
			finished++
			continue
		}
		// t returned Pending. Account for the tasks finished so far before
		// letting go: once released, its completion may own the mailbox and
		// settle it at once. (t is still counted: this cannot empty it.)
		if finished > 0 {
			mb.pending.Add(-finished)
			finished = 0
		}
		waiting, f := mb.released()
		if waiting {
			if testHookReleased != nil {
				testHookReleased()
			}
			break
		}
		if f {
			failed++
		} else {
			done++
		}
		finished++
	}
	w.turnCount++
	w.turnSeq.Store(w.turnCount) // even: between turns
	w.local.completed += uint64(done + failed)
	w.local.failed += uint64(failed)
	if w.local.turns++; w.local.turns%64 == 0 {
		w.flush()
	}
}

// Stats are cheap to read counters and gauges of an executor.
type Stats struct {
	Workers         int
	Mailboxes       int64 // mailboxes holding tasks
	QueuedMailboxes int64 // mailboxes waiting in a worker's queue for their turn
	Admitted        uint64
	Completed       uint64
	Failed          uint64
	BlockingRunning int64         // tasks running on the blocking pool
	Wakeups         uint64        // times a parked worker was woken (a costly path: a few µs each)
	LongestTurn     time.Duration // age of the oldest turn now running, since first observed (by an earlier Stats or an idle worker)
}

// Stats returns the current figures. It takes each shard lock briefly; call
// it at scrape frequency, not per message.
func (e *Executor) Stats() Stats {
	s := Stats{Workers: len(e.workers)}
	now := time.Now()
	for _, w := range e.workers {
		s.Mailboxes -= int64(w.emptied.Load())
		// Every placement leads to one turn: what was placed and has not
		// started its turn is queued.
		s.QueuedMailboxes += int64(w.requeued.Load()) - int64(w.turnSeq.Load()+1)/2
		s.Completed += w.completed.Load() - w.failed.Load()
		s.Failed += w.failed.Load()
		s.LongestTurn = max(s.LongestTurn, w.turnAge(now))
		s.Wakeups += w.wakeups.Load()
	}
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		s.Mailboxes += int64(sh.activated - sh.emptied.Load())
		s.QueuedMailboxes += int64(sh.activated + sh.resumed.Load())
		s.Admitted += sh.admitted
		sh.mu.Unlock()
		s.Completed += sh.asyncCompleted.Load()
		s.Failed += sh.asyncFailed.Load()
	}
	s.QueuedMailboxes = max(s.QueuedMailboxes, 0) // counts published at different times
	s.BlockingRunning = e.blocking.running.Load()
	return s
}

// Backlog is the number of tasks waiting for one key.
type Backlog struct {
	Group uint32
	Key   string
	Tasks int
}

// ID returns the group's identifier, as reported in Backlog.
func (g *Group) ID() uint32 { return g.id }

// TopBacklogs returns up to n keys of the groups with the most tasks waiting
// to start, largest first. The groups must share an executor. It locks each
// shard in turn; call it at scrape frequency, not per message. Tasks already
// taken into a running turn are not counted.
func TopBacklogs(n int, groups ...*Group) []Backlog {
	if n <= 0 || len(groups) == 0 {
		return nil
	}
	e := groups[0].ex
	wanted := make(map[uint32]bool, len(groups))
	for _, g := range groups {
		wanted[g.id] = true
	}
	var top []Backlog
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		sh.m.each(func(mb *mailbox) {
			d := len(mb.in) // empty mailboxes have none
			if d == 0 || !wanted[mb.group] || (len(top) == n && d <= top[n-1].Tasks) {
				return
			}
			b := Backlog{Group: mb.group, Key: mb.id, Tasks: d}
			j := len(top)
			if j < n {
				top = append(top, b)
			} else {
				j = n - 1
			}
			for ; j > 0 && top[j-1].Tasks < d; j-- {
				top[j] = top[j-1]
			}
			top[j] = b
		})
		sh.mu.Unlock()
	}
	return top
}

// Close stops admission, waits for queued, running and pending tasks until
// ctx is done, then stops the workers and the blocking pool. It returns an
// error if work was abandoned or a goroutine could not be stopped in time.
// Completions arriving after Close are ignored.
func (e *Executor) Close(ctx context.Context) error {
	var err error
	e.closeOnce.Do(func() { err = e.close(ctx) })
	return err
}

func (e *Executor) close(ctx context.Context) error {
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		sh.closed = true
		sh.mu.Unlock()
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var abandoned int64
	for {
		abandoned = e.Stats().Mailboxes
		if abandoned == 0 || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	e.stopping.Store(true)
	close(e.stopCh)
	e.blocking.stop()
	<-e.janitorDone // it never runs user code: it stops at once

	// Workers finish their current turn and return; blocking goroutines
	// finish their current task. Neither can be interrupted inside user
	// code, so wait for them only as long as ctx allows.
	for (e.live.Load() > 0 || e.blocking.live() > 0) && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	var stuck []string
	if n := e.live.Load(); n > 0 {
		stuck = append(stuck, fmt.Sprintf("%d workers still in a task", n))
	}
	if n := e.blocking.live(); n > 0 {
		stuck = append(stuck, fmt.Sprintf("%d blocking goroutines still in a task", n))
	}
	if abandoned > 0 || len(stuck) > 0 {
		return fmt.Errorf("closing executor: %w: %d mailboxes abandoned %v", context.Cause(ctx), abandoned, stuck)
	}
	return nil
}
