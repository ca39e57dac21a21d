package executor

// table is an open-addressing hash table of mailboxes with linear probing
// and backward-shift deletion. Unlike a Go map it leaves no tombstones, so a
// table that sees an insert and a delete for almost every message (the
// common case with many keys) keeps short probe sequences. Each slot keeps
// the mailbox's hash next to the pointer, so probing compares hashes without
// touching other mailboxes' memory. Not safe for concurrent use; the shard
// lock guards it.
type table struct {
	slots []slot
	n     int
}

type slot struct {
	hash uint64
	mb   *mailbox
}

func (t *table) get(h uint64, k mkey) *mailbox {
	if t.n == 0 {
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		sl := &t.slots[i]
		if sl.mb == nil {
			return nil
		}
		if sl.hash == h && sl.mb.key == k {
			return sl.mb
		}
	}
}

// put inserts mb, which must not be present.
func (t *table) put(mb *mailbox) {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	mask := uint64(len(t.slots) - 1)
	i := mb.hash & mask
	for t.slots[i].mb != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = slot{mb.hash, mb}
	t.n++
}

// del removes mb, which must be present.
func (t *table) del(mb *mailbox) {
	mask := uint64(len(t.slots) - 1)
	i := mb.hash & mask
	for t.slots[i].mb != mb {
		i = (i + 1) & mask
	}
	// Shift later entries of the probe run back into the hole.
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		e := t.slots[j]
		if e.mb == nil {
			break
		}
		home := e.hash & mask
		// e may move to i if i lies cyclically in [home, j).
		if (j-home)&mask >= (j-i)&mask {
			t.slots[i] = e
			i = j
		}
	}
	t.slots[i] = slot{}
	t.n--
}

func (t *table) grow() {
	old := t.slots
	size := 2 * len(old)
	if size == 0 {
		size = 16
	}
	t.slots = make([]slot, size)
	t.n = 0
	for _, sl := range old {
		if sl.mb != nil {
			t.put(sl.mb)
		}
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
