package executor

import (
	"strconv"
	"testing"
	"time"

	"github.com/wowd/wowd/internal/testwait"
)

// TestHotKeys: the keys with the most unfinished tasks are named, largest
// first, among the asked groups only; keys below the threshold are not; a
// drained key is gone; and Busy counts the worker held by the gate.
func TestHotKeys(t *testing.T) {
	e := New(Options{Workers: 1})
	defer closeOK(t, e)
	g := e.Group(false)
	release := gate(t, g)
	if b := e.Busy(); b != 1 {
		t.Errorf("busy workers %d with one turn held, want 1", b)
	}
	noop := fn(func(Resume) Status { return Done })
	backlogs := []int{5, 50, 20, hotMin - 1}
	for i, n := range backlogs {
		for range n {
			if err := g.Submit("k"+strconv.Itoa(i), noop); err != nil {
				t.Fatal(err)
			}
		}
	}
	other := e.Group(false)
	for range 100 {
		if err := other.Submit("k1", noop); err != nil { // another group's key, more backlogged
			t.Fatal(err)
		}
	}
	hot := HotKeys(10, g)
	if len(hot) != 3 {
		t.Fatalf("hot keys %+v, want k1, k2, k0 (k3 is below the threshold)", hot)
	}
	for i, want := range []HotKey{{g.ID(), "k1", 50}, {g.ID(), "k2", 20}, {g.ID(), "k0", 5}} {
		if hot[i] != want {
			t.Errorf("hot[%d] = %+v, want %+v", i, hot[i], want)
		}
	}
	if hot := HotKeys(1, g, other); len(hot) != 1 || hot[0].Group != other.ID() || hot[0].Unfinished != 100 {
		t.Errorf("top of both groups %+v, want the other group's k1 with 100", hot)
	}
	release()
	testwait.For(t, 10*time.Second, "drain", func() bool { return e.Stats().Mailboxes == 0 })
	if hot := HotKeys(10, g, other); len(hot) != 0 {
		t.Fatalf("hot keys after drain: %+v", hot)
	}
}

// TestHotKeysBounded: a shard keeps at most hotSlots candidates, the
// largest it was offered.
func TestHotKeysBounded(t *testing.T) {
	var sh shard
	mbs := make([]*mailbox, 3*hotSlots)
	for i := range mbs {
		mbs[i] = &mailbox{id: "k" + strconv.Itoa(i)}
		mbs[i].pending.Store(int64(hotMin + i))
		sh.offerHot(mbs[i], int64(hotMin+i))
		sh.offerHot(mbs[i], int64(hotMin+i)) // twice: kept once
	}
	seen := map[*mailbox]bool{}
	for _, mb := range sh.hot {
		if mb == nil || seen[mb] {
			t.Fatalf("candidates %v: a slot empty or repeated", sh.hot)
		}
		seen[mb] = true
	}
	for _, mb := range mbs[len(mbs)-hotSlots:] {
		if !seen[mb] {
			t.Errorf("%s (%d unfinished) is not a candidate", mb.id, mb.pending.Load())
		}
	}
}
