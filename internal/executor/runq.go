package executor

import "sync/atomic"

// runq is a worker's queue of mailboxes ready to run, in the manner of the Go
// scheduler's per-P run queue: only the owning worker puts (at the tail);
// the owner and idle workers take from the head with a CAS. Mailboxes
// placed on the worker first land in its inbox (a stack pushed with a CAS)
// and move here in batches when the worker takes the whole inbox, so what
// waits here in order can still be stolen one at a time.
type runq struct {
	head atomic.Uint32 // next slot to take; CAS by owner and thieves
	tail atomic.Uint32 // next slot to fill; written by the owner only
	_    [56]byte
	buf  [runqSize]atomic.Pointer[mailbox]
}

const runqSize = 256

// len returns the number of mailboxes held (a snapshot).
func (q *runq) len() uint32 { return q.tail.Load() - q.head.Load() }

// put appends mb; it reports false when full. Owner only.
func (q *runq) put(mb *mailbox) bool {
	t := q.tail.Load()
	if t-q.head.Load() >= runqSize {
		return false
	}
	q.buf[t%runqSize].Store(mb)
	q.tail.Store(t + 1)
	return true
}

// get takes the oldest mailbox, or nil. Safe for the owner and thieves.
//
// The slot keeps its pointer until put reuses it. A thief cannot clear it:
// once head moved, the owner may fill the slot again. The owner could, at
// the cost of an atomic store per turn; it does not, since what stale slots
// keep reachable is bounded: at most runqSize mailboxes per worker, and one
// the table and the free list have dropped is idle and holds no task (a
// turn clears each task's slot as it takes the task).
func (q *runq) get() *mailbox {
	for {
		h := q.head.Load()
		if h == q.tail.Load() {
			return nil
		}
		mb := q.buf[h%runqSize].Load()
		// The slot cannot be refilled before head moves past it, and only the
		// CAS below moves it: if it succeeds, mb is the mailbox we read.
		if q.head.CompareAndSwap(h, h+1) {
			return mb
		}
	}
}
