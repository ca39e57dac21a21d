package executor

import (
	"cmp"
	"slices"
)

// The busiest keys, at bounded cost.
//
// TopBacklogs reads every mailbox in the table: fine at scrape frequency for
// one figure, too much for an admin page asking for a hundred names while
// a burst of keys fills the tables. Instead each shard keeps a few
// candidates: a submission that brings its mailbox to hotMin unfinished
// tasks, or to any power of two above (16, 32, …), offers the mailbox to its
// shard's set (under the shard lock it already holds; the common submission
// pays one comparison). A full set replaces its smallest member if that is
// smaller. HotKeys reads only the sets: at most hotSlots mailboxes per
// shard (64 shards up to 4 workers, 16 per worker beyond), each under its
// shard's lock. A candidate's figures are read when asked, so a mailbox that
// drained meanwhile reports its current backlog (or nothing, when idle),
// and one reused for another key reports that key.
//
// It is approximate where exactness would cost a scan: a shard with more
// than hotSlots keys growing at once keeps the largest it saw as they
// crossed a threshold, and a key whose backlog stays below hotMin is never
// a candidate.

// hotSlots is how many candidate mailboxes a shard keeps.
const hotSlots = 8

// hotMin is the number of unfinished tasks from which a mailbox becomes a
// candidate.
const hotMin = 4

// hotSet is a shard's candidates; slots fill from the front and are never
// emptied, only replaced.
type hotSet [hotSlots]*mailbox

// offerHot offers mb, which just reached n unfinished tasks, to the shard's
// candidates. Called with sh.mu held.
func (sh *shard) offerHot(mb *mailbox, n int64) {
	if sh.hot == nil {
		sh.hot = new(hotSet)
	}
	low, lowN := -1, n
	for i, c := range sh.hot {
		switch {
		case c == mb:
			return
		case c == nil:
			sh.hot[i] = mb
			return
		}
		if p := c.pending.Load(); p < lowN {
			low, lowN = i, p
		}
	}
	if low >= 0 {
		sh.hot[low] = mb
	}
}

// isHotThreshold reports whether a mailbox that reached n unfinished tasks
// is offered as a candidate.
func isHotThreshold(n int64) bool { return n >= hotMin && n&(n-1) == 0 }

// HotKey is a key with unfinished tasks.
type HotKey struct {
	Group uint32
	Key   string
	// Unfinished counts the key's tasks submitted and not finished: the one
	// running (or waiting for its completion) and those queued behind it.
	Unfinished int
}

// HotKeys returns up to n keys of the groups with the most unfinished
// tasks among the candidates (see above), largest first, ties by key. The
// groups must share an executor. It takes each shard's lock in turn, briefly,
// and holds no other lock meanwhile.
func HotKeys(n int, groups ...*Group) []HotKey {
	if n <= 0 || len(groups) == 0 {
		return nil
	}
	e := groups[0].ex
	wanted := make(map[uint32]bool, len(groups))
	for _, g := range groups {
		wanted[g.id] = true
	}
	var out []HotKey
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		if sh.hot != nil {
			for _, mb := range sh.hot {
				if mb == nil {
					break
				}
				if p := mb.pending.Load(); p > 0 && mb.id != "" && wanted[mb.group] {
					out = append(out, HotKey{Group: mb.group, Key: mb.id, Unfinished: int(p)})
				}
			}
		}
		sh.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b HotKey) int {
		return cmp.Or(cmp.Compare(b.Unfinished, a.Unfinished), cmp.Compare(a.Key, b.Key), cmp.Compare(a.Group, b.Group))
	})
	return out[:min(n, len(out))]
}

// Busy returns the number of workers running a turn now.
func (e *Executor) Busy() int {
	n := 0
	for _, w := range e.workers {
		if w.turnSeq.Load()&1 == 1 {
			n++
		}
	}
	return n
}
