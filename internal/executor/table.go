package executor

// table is an open-addressing hash table of mailboxes with linear probing.
// It has no delete: idle mailboxes are dropped in bulk by rebuilding the
// table (shard.sweep), which keeps probe sequences short without tombstones.
// Each slot keeps the mailbox's hash next to the pointer, and the hash
// identifies the mailbox (see hashKey): a lookup touches no mailbox. Not safe for concurrent
// use; the shard lock guards it.
type table struct {
	slots []slot
	n     int
}

type slot struct {
	hash uint64
	mb   *mailbox
}

func (t *table) get(h uint64) *mailbox {
	if t.n == 0 {
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		sl := &t.slots[i]
		if sl.mb == nil {
			return nil
		}
		if sl.hash == h {
			return sl.mb
		}
	}
}

// full reports whether one more mailbox would fill the table past half.
func (t *table) full() bool { return 2*(t.n+1) > len(t.slots) }

// put inserts mb, which must not be present; the table must not be full.
func (t *table) put(mb *mailbox) {
	mask := uint64(len(t.slots) - 1)
	i := mb.hash & mask
	for t.slots[i].mb != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = slot{mb.hash, mb}
	t.n++
}

// resize rehashes the table into size slots (a power of two, 16 or more).
func (t *table) resize(size int) {
	old := t.slots
	t.slots = make([]slot, max(size, 16))
	t.n = 0
	for _, sl := range old {
		if sl.mb != nil {
			t.put(sl.mb)
		}
	}
}

// rebuild empties the table into size slots and inserts mbs.
func (t *table) rebuild(size int, mbs []*mailbox) {
	if size = max(size, 16); size == len(t.slots) {
		clear(t.slots)
	} else {
		t.slots = make([]slot, size)
	}
	t.n = 0
	for _, mb := range mbs {
		t.put(mb)
	}
}

// each calls fn for every mailbox.
func (t *table) each(fn func(*mailbox)) {
	for _, sl := range t.slots {
		if sl.mb != nil {
			fn(sl.mb)
		}
	}
}
