package executor

import (
	"hash/maphash"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/wowd/wowd/internal/testwait"
)

// tableFigures sums the shards' tables: mailboxes held (active or idle) and
// slots.
func tableFigures(e *Executor) (held, slots, pooled int) {
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		held += sh.m.n
		slots += len(sh.m.slots)
		pooled += len(sh.free)
		sh.mu.Unlock()
	}
	return held, slots, pooled
}

// lookup returns the mailbox of key in g, active or idle, or nil.
func lookup(g *Group, key string) *mailbox {
	h := g.ex.hashKey(g.id, g.blocking, key)
	sh := &g.ex.shards[h&g.ex.shardMask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.m.get(h)
}

func runAll(t *testing.T, g *Group, keys []string) {
	t.Helper()
	var wg sync.WaitGroup
	wg.Add(len(keys))
	for _, k := range keys {
		if err := g.Submit(k, fn(func(Resume) Status { wg.Done(); return Done })); err != nil {
			t.Fatal(err)
		}
	}
	waitOrFail(t, &wg, 10*time.Second)
}

// setJanitorEvery sets how often executors made after it run their janitor,
// until the test ends. Tests that run the janitor's rounds by hand set it to
// an hour so a real round cannot land between theirs.
func setJanitorEvery(t *testing.T, d time.Duration) {
	old := janitorEvery
	janitorEvery = d
	t.Cleanup(func() { janitorEvery = old })
}

// A key that comes back finds its idle mailbox as it was: no new mailbox, no
// table insert.
func TestIdleMailboxReused(t *testing.T) {
	setJanitorEvery(t, time.Hour)
	e := New(Options{Workers: 2})
	defer closeOK(t, e)
	g := e.Group(false)
	runAll(t, g, []string{"cart-1"})
	testwait.For(t, 10*time.Second, "the mailbox to go idle", func() bool { return e.Stats().Mailboxes == 0 })
	first := lookup(g, "cart-1")
	if first == nil {
		t.Fatal("the idle mailbox is not in the table")
	}
	runAll(t, g, []string{"cart-1"})
	if again := lookup(g, "cart-1"); again != first {
		t.Fatalf("the key came back to mailbox %p, want its idle one %p", again, first)
	}
	if lookup(g, "cart-2") != nil || lookup(e.Group(false), "cart-1") != nil {
		t.Fatal("lookup found a mailbox of another key or group")
	}
}

// Keys that never come back do not grow the tables: new keys make room by
// reclaiming idle mailboxes, so the tables stay sized for the keys active at
// once.
func TestUniqueKeysKeepTablesSmall(t *testing.T) {
	e := New(Options{Workers: 2})
	defer closeOK(t, e)
	g := e.Group(false)
	const active = 256 // at most this many keys hold tasks at once
	keys := make([]string, active)
	for round := range 400 { // 102,400 distinct keys in all
		for i := range keys {
			keys[i] = "order-" + strconv.Itoa(round*active+i)
		}
		runAll(t, g, keys)
	}
	held, slots, _ := tableFigures(e)
	// 64 shards; a shard grows only while a quarter of it holds active
	// mailboxes, so with ~4 active per shard a table stays at 16 or 32
	// slots; allow for an unlucky shard.
	if limit := 64 * 64; slots > limit || held > slots/2 {
		t.Fatalf("after 102,400 distinct keys, %d at a time: tables hold %d mailboxes in %d slots (limit %d slots)", active, held, slots, limit)
	}
}

// The janitor gives back what a burst took once its keys stay idle for a
// round, and spares keys active since its previous round.
func TestJanitorReclaimsIdleMailboxes(t *testing.T) {
	setJanitorEvery(t, time.Hour)
	e := New(Options{Workers: 2})
	defer closeOK(t, e)
	g := e.Group(false)
	keys := make([]string, 20_000)
	for i := range keys {
		keys[i] = "device-" + strconv.Itoa(i)
	}
	// A burst: every key active at once, held by tasks that complete later.
	var resumes []Resume
	var mu sync.Mutex
	var started sync.WaitGroup
	started.Add(len(keys))
	for _, k := range keys {
		err := g.Submit(k, fn(func(r Resume) Status {
			mu.Lock()
			resumes = append(resumes, r)
			mu.Unlock()
			started.Done()
			return Pending
		}))
		if err != nil {
			t.Fatal(err)
		}
	}
	waitOrFail(t, &started, 10*time.Second)
	burstHeld, burstSlots, _ := tableFigures(e)
	if burstHeld != len(keys) {
		t.Fatalf("tables hold %d mailboxes during the burst, want %d", burstHeld, len(keys))
	}
	for _, r := range resumes {
		r.Complete(false)
	}
	testwait.For(t, 10*time.Second, "the burst to drain", func() bool { return e.Stats().Mailboxes == 0 })

	e.reclaimIdle() // the burst's keys were active since the last round: spared
	if held, _, _ := tableFigures(e); held != len(keys) {
		t.Fatalf("first round after the burst: %d mailboxes held, want all %d spared", held, len(keys))
	}
	runAll(t, g, keys[:1]) // one key comes back between the rounds
	e.reclaimIdle()
	held, slots, pooled := tableFigures(e)
	if held != 1 || lookup(g, keys[0]) == nil {
		t.Fatalf("second round: %d mailboxes held, want only the key that came back", held)
	}
	if slots != 64*16 || pooled > 64*minFree {
		t.Fatalf("second round: %d slots (burst %d), %d pooled; want the tables back to 16 slots each and at most %d pooled per shard", slots, burstSlots, pooled, minFree)
	}
	e.reclaimIdle()
	if held, _, _ := tableFigures(e); held != 0 {
		t.Fatalf("third round: %d mailboxes held, want 0", held)
	}
}

// Keys whose hashes collide share a mailbox: they lose parallelism with each
// other, never order. Forced here with a hash that sees only the last byte.
func TestCollidingKeysKeepTheirOrder(t *testing.T) {
	defer func(h func(maphash.Seed, string) uint64) { hashString = h }(hashString)
	hashString = func(_ maphash.Seed, s string) uint64 { return uint64(s[len(s)-1]) }
	e := New(Options{Workers: 2})
	defer closeOK(t, e)
	g := e.Group(false)
	const keys, messages = 40, 20_000 // 40 keys, 10 hashes
	c := newOrderChecker(keys)
	names := make([]string, keys)
	for i := range names {
		names[i] = strconv.Itoa(i) + "-" + strconv.Itoa(i%10)
	}
	var wg sync.WaitGroup
	wg.Add(messages)
	seqs := make([]int64, keys)
	rng := rand.New(rand.NewPCG(7, 7))
	for range messages {
		k := rng.IntN(keys)
		if err := g.Submit(names[k], &orderTask{c: c, key: k, seq: seqs[k], mode: rng.IntN(4), wg: &wg}); err != nil {
			t.Fatal(err)
		}
		seqs[k]++
	}
	waitOrFail(t, &wg, 30*time.Second)
	select {
	case err := <-c.errs:
		t.Fatal(err)
	default:
	}
	for k := range keys {
		if got := c.next[k].Load(); got != seqs[k] {
			t.Fatalf("key %d ran %d tasks, want %d", k, got, seqs[k])
		}
	}
	if held, _, _ := tableFigures(e); held != 10 {
		t.Fatalf("tables hold %d mailboxes, want one per distinct hash (10)", held)
	}
	// Only hashes of blocking groups' keys have the top bit, so a blocking
	// group's key can never share a mailbox run by a worker.
	for _, k := range names {
		if e.hashKey(g.id, false, k)>>63 != 0 || e.hashKey(g.id, true, k)>>63 != 1 {
			t.Fatalf("key %q: the top bit of the hash does not tell blocking groups", k)
		}
	}
}
