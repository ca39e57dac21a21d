package executor

import (
	"hash/maphash"
	"strings"
)

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
	sh.submitted++
	mb := sh.m.get(h)
	if mb == nil {
		mb = sh.take()
		// A copy: callers may pass views of buffers they reuse, and the
		// mailbox outlives the task (kept while idle, named in stats).
		mb.group, mb.id, mb.hash = g.id, strings.Clone(key), h
		sh.insert(mb)
	}
	if n := mb.pending.Add(1); n > 1 {
		mb.in = append(mb.in, t) // its owner will take it
		if isHotThreshold(n) {
			sh.offerHot(mb, n)
		}
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
