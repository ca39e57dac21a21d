package receiver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/park"
	"github.com/wowd/wowd/internal/testwait"
)

// TestSkipResumedByTheNextOwnerDeadLettersOnlyTheHead: a skip of an
// aggregate with 300 parked messages is cut short past its first chunk
// (256 messages, after which its progress moves the head on in the state
// topic): the partition moves to another member while the handler holds
// the 257th. The new owner resumes the skip from the recorded head: it
// hands the 257th to the handler, and the dead-letter topic holds the
// original head only. (Resumed as a new skip, it dead-lettered the 257th,
// which never failed: a hole in the aggregate's history.)
func TestSkipResumedByTheNextOwnerDeadLettersOnlyTheHead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const group, n, head = "g-park-skip-move", 302, 2
		const held = head + redriveChunk // the 257th parked message
		h := newVirtualHarness(t, 1)
		produce(t, h.c, testTopic, n, 1) // agg-0 only: #0..#301; parks at #2
		var broken, holding atomic.Bool
		broken.Store(true)
		var mu sync.Mutex
		var firsts []uint64 // first successful handlings, in order
		seen := map[uint64]bool{}
		hd := handler.Sync(func(ctx context.Context, m *handler.Message) error {
			seq := binary.BigEndian.Uint64(m.Value)
			switch {
			case broken.Load() && seq == head:
				return handler.Classed(handler.Permanent, errors.New("rejected"))
			case seq == held && !holding.Swap(true):
				<-ctx.Done() // held until the partition moves
				return ctx.Err()
			}
			mu.Lock()
			if !seen[seq] {
				seen[seq] = true
				firsts = append(firsts, seq)
			}
			mu.Unlock()
			return nil
		})
		r1 := h.receiver(group, hd, 16, parking)
		testwait.For(t, 30*time.Second, "agg-0 parked and committed", func() bool {
			return h.committedAtEnd(group) && h.parkedState("agg-0") != nil
		})
		first := h.parkedState("agg-0").Head
		broken.Store(false)
		h.ask("agg-0", park.Skip)
		testwait.For(t, 60*time.Second, "the skip past its first chunk, holding the 257th", func() bool {
			st := h.parkedState("agg-0")
			return holding.Load() && st != nil && st.Head.Offset == first.Offset+redriveChunk
		})
		r2 := h.receiver(group, hd, 16, parking)
		stop(t, r1) // the partition moves to r2 in the middle of the skip
		testwait.For(t, 60*time.Second, "agg-0 unparked by the new owner", func() bool { return h.parkedState("agg-0") == nil })
		mu.Lock()
		got := slices.Clone(firsts)
		mu.Unlock()
		if want := append(seqs(0, head), seqs(head+1, n)...); !slices.Equal(got, want) {
			t.Errorf("agg-0 handled %v, want #0..#%d but the skipped #%d, in order", got, n-1, head)
		}
		var dead []string
		for _, rec := range dlqRecords(t, h.c, testTopic+".dlq", 0) {
			dead = append(dead, fmt.Sprintf("%s#%d", rec.Key, binary.BigEndian.Uint64(rec.Value)))
		}
		if want := []string{fmt.Sprintf("agg-0#%d", head)}; !slices.Equal(dead, want) {
			t.Errorf("dead letters %v, want %v only", dead, want)
		}
		stop(t, r2)
	})
}

// TestSkipAfterARedrivesProgressDeadLettersOnlyFailures: a redrive of an
// aggregate with 300 parked messages hands the failed head (#2, fixed
// meanwhile) over successfully and is cut short past its first chunk, its
// progress moving the head on to #258; then an operator asks for a skip.
// Nothing that is left failed: the skip dead-letters nothing and hands
// #258.. over. (It took the progressed head for the one that failed and
// dead-lettered #258, which never failed: a hole in the aggregate's
// history.)
func TestSkipAfterARedrivesProgressDeadLettersOnlyFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const group, n, head = "g-park-redrive-skip", 302, 2
		const held = head + redriveChunk // the 257th parked message
		h := newVirtualHarness(t, 1)
		produce(t, h.c, testTopic, n, 1) // agg-0 only: #0..#301; parks at #2
		var broken, holding atomic.Bool
		broken.Store(true)
		var mu sync.Mutex
		handled := map[uint64]bool{}
		hd := handler.Sync(func(ctx context.Context, m *handler.Message) error {
			seq := binary.BigEndian.Uint64(m.Value)
			switch {
			case broken.Load() && seq == head:
				return handler.Classed(handler.Permanent, errors.New("rejected"))
			case seq == held && !holding.Swap(true):
				<-ctx.Done() // held until the receiver stops
				return ctx.Err()
			}
			mu.Lock()
			handled[seq] = true
			mu.Unlock()
			return nil
		})
		r1 := h.receiver(group, hd, 16, parking)
		testwait.For(t, 30*time.Second, "agg-0 parked", func() bool {
			return h.committedAtEnd(group) && h.parkedState("agg-0") != nil
		})
		first := h.parkedState("agg-0").Head
		broken.Store(false) // the cause is fixed: #2 is handled by the redrive
		h.ask("agg-0", park.Redrive)
		testwait.For(t, 60*time.Second, "the redrive past its first chunk", func() bool {
			st := h.parkedState("agg-0")
			return holding.Load() && st != nil && st.Head.Offset == first.Offset+redriveChunk
		})
		stop(t, r1) // cut short
		h.ask("agg-0", park.Skip)
		r2 := h.receiver(group, hd, 16, parking)
		testwait.For(t, 60*time.Second, "agg-0 unparked", func() bool { return h.parkedState("agg-0") == nil })
		var dead []string
		for _, rec := range dlqRecords(t, h.c, testTopic+".dlq", 0) {
			dead = append(dead, fmt.Sprintf("%s#%d", rec.Key, binary.BigEndian.Uint64(rec.Value)))
		}
		if len(dead) > 0 {
			t.Errorf("dead letters %v: none of them failed (#%d was redriven successfully)", dead, head)
		}
		mu.Lock()
		for seq := uint64(0); seq < n; seq++ {
			if !handled[seq] {
				t.Errorf("agg-0 #%d never handled", seq)
			}
		}
		mu.Unlock()
		stop(t, r2)
	})
}

// TestSkipCutShortByARewindResumesFromItsProgress: a skip of an aggregate
// with 300 parked messages dead-letters the head (#2), hands #3..#257 over,
// writes its progress, and is cut short holding #258 when the Kafka client
// rewinds the partition. The same ownership keeps the aggregate's entry and
// does the skip again from the progress recorded: the head is not
// dead-lettered a second time, and #3..#257 are not handed over again.
// (The entry kept the state it was loaded with: the skip started over
// from #2, dead-lettering it twice and handing #3.. over again after
// #257.)
func TestSkipCutShortByARewindResumesFromItsProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const group, n, head = "g-park-rewind-skip", 302, 2
		const held = head + redriveChunk // the 257th parked message
		h := newVirtualHarness(t, 1)
		produce(t, h.c, testTopic, n, 1) // agg-0 only: #0..#301; parks at #2
		var broken, holding atomic.Bool
		broken.Store(true)
		var mu sync.Mutex
		var order []uint64 // successful handlings, in order
		hd := handler.Sync(func(ctx context.Context, m *handler.Message) error {
			seq := binary.BigEndian.Uint64(m.Value)
			switch {
			case broken.Load() && seq == head:
				return handler.Classed(handler.Permanent, errors.New("rejected"))
			case seq == held && !holding.Swap(true):
				<-ctx.Done() // held until the rewind
				return ctx.Err()
			}
			mu.Lock()
			order = append(order, seq)
			mu.Unlock()
			return nil
		})
		r := h.receiver(group, hd, 16, parking)
		testwait.For(t, 30*time.Second, "agg-0 parked", func() bool {
			return h.committedAtEnd(group) && h.parkedState("agg-0") != nil
		})
		first := h.parkedState("agg-0").Head
		broken.Store(false)
		h.ask("agg-0", park.Skip)
		testwait.For(t, 60*time.Second, "the skip past its first chunk", func() bool {
			st := h.parkedState("agg-0")
			return holding.Load() && st != nil && st.Head.Offset == first.Offset+redriveChunk && st.Skipped
		})
		rewindPart0(r)
		testwait.For(t, 60*time.Second, "agg-0 unparked", func() bool { return h.parkedState("agg-0") == nil })
		dead := deadSeqs(t, h.c)
		if !slices.Equal(dead, []uint64{head}) {
			t.Errorf("dead letters %v, want [%d] once (the skip's progress recorded it)", dead, head)
		}
		mu.Lock()
		got := slices.Clone(order)
		mu.Unlock()
		if i := slices.Index(got, held-1); i < 0 || slices.Contains(got[i+1:], head+1) {
			t.Errorf("#%d handled again after #%d (%d handlings in all): the resumed skip started from the entry's first head, not its progress", head+1, held-1, len(got))
		}
		want := append(seqs(0, head), seqs(head+1, n)...)
		if got = slices.Compact(got); !slices.Equal(got, want) {
			i := 0
			for i < min(len(got), len(want)) && got[i] == want[i] {
				i++
			}
			t.Errorf("agg-0 handled #0..#%d but the skipped #%d out of order, or not all: from the %dth handling on, %v", n-1, head, i+1, got[i:min(len(got), i+5)])
		}
		stop(t, r)
	})
}
