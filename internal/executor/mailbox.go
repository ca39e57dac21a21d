package executor

import "sync/atomic"

// mailbox holds the tasks of one key.
//
// pending counts the tasks submitted and not finished. The submitter that
// raises it from 0 owns the mailbox and places it on a worker; the owner that
// brings it back to 0 lets go without a lock and does not touch it again: it
// stays in the table, idle, until reactivated or swept.
// Between those, exactly one party owns it: the submitter that activated it
// until it places it (SubmitBatch holds several and places them together),
// a worker's queue, a worker's turn, a pending task's completion, or the
// blocking pool.
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
// side. The caller counts an emptied mailbox and then notifies changed: a
// Notify before the count is visible to Stats would let Close look, see the
// mailbox still busy, and sleep to its deadline.
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
		e.changed.Notify() // after the count: see settle
	}
}
