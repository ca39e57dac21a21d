package receiver

// tracker follows the records of one partition incarnation from delivery to
// completion, in delivery (offset) order, and yields the commit watermark:
// the offset after the longest completed prefix. Records complete in any
// order; each is popped from the head exactly once, so push and complete are
// O(1) amortized. Gaps in offsets (compaction, transaction markers) need no
// care: only delivered records are held.
//
// Not safe for concurrent use; partition.mu guards it.
type tracker struct {
	ring    []entry
	head    int   // index of the oldest entry
	n       int   // entries held
	headSeq int64 // sequence number of the oldest entry

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
	j      *job // the record's job until it finished or was dropped; for the deadline watcher
}

func newTracker() *tracker { return &tracker{ring: make([]entry, 64), last: -1} }

// next returns the sequence number the next push will return.
func (t *tracker) nextSeq() int64 { return t.headSeq + int64(t.n) }

// push records a delivered record carried by j and returns its sequence
// number (nextSeq before the call).
func (t *tracker) push(offset int64, epoch int32, j *job) int64 {
	if t.n == len(t.ring) {
		ring := make([]entry, 2*len(t.ring))
		for i := range t.n {
			ring[i] = t.ring[(t.head+i)%len(t.ring)]
		}
		t.ring, t.head = ring, 0
	}
	t.ring[(t.head+t.n)%len(t.ring)] = entry{offset: offset, epoch: epoch, j: j}
	t.n++
	t.last = offset
	return t.headSeq + int64(t.n) - 1
}

// complete marks the record seq done and advances the watermark past the
// completed prefix.
func (t *tracker) complete(seq int64) {
	i := seq - t.headSeq
	if i < 0 || i >= int64(t.n) {
		return // not held: already popped, or from another incarnation
	}
	e := &t.ring[(t.head+int(i))%len(t.ring)]
	e.done, e.j = true, nil
	for t.n > 0 {
		e := &t.ring[t.head]
		if !e.done {
			break
		}
		t.next, t.epoch, t.ok = e.offset+1, e.epoch, true
		*e = entry{}
		t.head = (t.head + 1) % len(t.ring)
		t.n--
		t.headSeq++
	}
}

// detach forgets the job of the record seq, which stays unfinished.
func (t *tracker) detach(seq int64) {
	if i := seq - t.headSeq; i >= 0 && i < int64(t.n) {
		t.ring[(t.head+int(i))%len(t.ring)].j = nil
	}
}

// jobs calls fn with the job of every unfinished record, oldest first.
func (t *tracker) jobs(fn func(*job)) {
	for i := range t.n {
		if e := &t.ring[(t.head+i)%len(t.ring)]; !e.done && e.j != nil {
			fn(e.j)
		}
	}
}

// watermark returns the offset to commit and its epoch, if any record has
// completed.
func (t *tracker) watermark() (next int64, epoch int32, ok bool) { return t.next, t.epoch, t.ok }

// span is the number of records held: delivered but not yet committable.
func (t *tracker) span() int { return t.n }
