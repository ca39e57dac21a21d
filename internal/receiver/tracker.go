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
}

func newTracker() *tracker { return &tracker{ring: make([]entry, 64), last: -1} }

// push records a delivered record and returns its sequence number.
func (t *tracker) push(offset int64, epoch int32) int64 {
	if t.n == len(t.ring) {
		ring := make([]entry, 2*len(t.ring))
		for i := range t.n {
			ring[i] = t.ring[(t.head+i)%len(t.ring)]
		}
		t.ring, t.head = ring, 0
	}
	t.ring[(t.head+t.n)%len(t.ring)] = entry{offset: offset, epoch: epoch}
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
	t.ring[(t.head+int(i))%len(t.ring)].done = true
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

// watermark returns the offset to commit and its epoch, if any record has
// completed.
func (t *tracker) watermark() (next int64, epoch int32, ok bool) { return t.next, t.epoch, t.ok }

// span is the number of records held: delivered but not yet committable.
func (t *tracker) span() int { return t.n }
