package receiver

import "github.com/wowd/wowd/internal/ring"

// tracker follows the records of one partition incarnation from delivery to
// completion, in delivery (offset) order, and yields the commit watermark:
// the offset after the longest completed prefix. Records complete in any
// order; each is popped from the head exactly once, so push and complete are
// O(1) amortized. Gaps in offsets (compaction, transaction markers) need no
// care: only delivered records are held.
//
// Not safe for concurrent use; partition.mu guards it.
type tracker struct {
	q       ring.Ring[entry] // delivered records not yet popped, oldest first
	headSeq int64            // sequence number of the oldest entry

	// set holds the unfinished jobs by sequence number instead of q, for
	// records that belong to no partition (the ingest's): no watermark, and
	// a record that stays unfinished holds nothing after it.
	set     map[int64]*job
	nextSet int64

	// The watermark: the next offset to consume, and the leader epoch of the
	// record before it. ok is false until a record completed.
	next  int64
	epoch int32
	ok    bool
	last  int64 // offset of the newest delivered record, -1 before any
}

type entry struct {
	offset int64
	epoch  int32
	done   bool
	j      *job // the record's job until it finished or was dropped (closed incarnations too: the job is pooled next); for the scans of the deadline watcher and resolvedBelow
}

func newTracker() *tracker { return &tracker{last: -1} }

// newUnorderedTracker returns a tracker of records without offsets, which
// finish in any order and yield no watermark.
func newUnorderedTracker() *tracker { return &tracker{last: -1, set: make(map[int64]*job)} }

// nextSeq returns the sequence number the next push will return.
func (t *tracker) nextSeq() int64 {
	if t.set != nil {
		return t.nextSet
	}
	return t.headSeq + int64(t.q.Len())
}

// push records a delivered record carried by j and returns its sequence
// number (nextSeq before the call).
func (t *tracker) push(offset int64, epoch int32, j *job) int64 {
	seq := t.nextSeq()
	if t.set != nil {
		t.set[seq] = j
		t.nextSet++
		return seq
	}
	t.q.Push(entry{offset: offset, epoch: epoch, j: j})
	t.last = offset
	return seq
}

// at returns the entry of seq, or nil when it is not held (already popped,
// or from another incarnation).
func (t *tracker) at(seq int64) *entry {
	if i := seq - t.headSeq; i >= 0 && i < int64(t.q.Len()) {
		return t.q.At(int(i))
	}
	return nil
}

// complete marks the record seq done and advances the watermark past the
// completed prefix.
func (t *tracker) complete(seq int64) {
	if t.set != nil {
		delete(t.set, seq)
		return
	}
	e := t.at(seq)
	if e == nil {
		return
	}
	e.done, e.j = true, nil
	for t.q.Len() > 0 && t.q.At(0).done {
		e, _ := t.q.Pop()
		t.next, t.epoch, t.ok = e.offset+1, e.epoch, true
		t.headSeq++
	}
}

// detach forgets the job of the record seq, which stays unfinished.
func (t *tracker) detach(seq int64) {
	if t.set != nil {
		delete(t.set, seq) // dropped: an unordered tracker keeps nothing of it
		return
	}
	if e := t.at(seq); e != nil {
		e.j = nil
	}
}

// jobs calls fn with the job of every unfinished record, oldest first.
func (t *tracker) jobs(fn func(*job)) {
	for _, j := range t.set {
		fn(j)
	}
	for i := range t.q.Len() {
		if e := t.q.At(i); !e.done && e.j != nil {
			fn(e.j)
		}
	}
}

// firstUnfinished returns the offset of the oldest record that has not
// finished and its leader epoch, or -1 and -1 when every delivered record
// has.
func (t *tracker) firstUnfinished() (offset int64, epoch int32) {
	if t.q.Len() == 0 { // an unordered tracker has no offsets
		return -1, -1
	}
	e := t.q.At(0)
	return e.offset, e.epoch
}

// watermark returns the offset to commit and its epoch, if any record has
// completed.
func (t *tracker) watermark() (next int64, epoch int32, ok bool) { return t.next, t.epoch, t.ok }

// span is the number of records held: delivered but not yet committable.
func (t *tracker) span() int { return t.q.Len() + len(t.set) }
