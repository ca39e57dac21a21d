package receiver

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/memory"
	"github.com/wowd/wowd/internal/park"
	"github.com/wowd/wowd/internal/testwait"
)

// heldFetch is a hand-made fetch of partition p: offsets from to to, values of size bytes.
func heldFetch(p int32, from, to int64, size int) kgo.FetchTopicPartition {
	fp := kgo.FetchTopicPartition{Topic: testTopic, FetchPartition: kgo.FetchPartition{Partition: p, HighWatermark: to}}
	for o := from; o < to; o++ {
		fp.Records = append(fp.Records, &kgo.Record{Topic: testTopic, Partition: p, Offset: o,
			Key: []byte("p" + strconv.Itoa(int(p)) + "k" + strconv.FormatInt(o, 10)), Value: make([]byte, size)})
	}
	return fp
}

// finishAll acknowledges messages from acks until none of p's admitted
// records is in flight. Draining only what acks holds at one moment is not
// enough: a record admitted by the last round may reach the handler after
// it, and its mailbox is then abandoned when the executor closes.
func finishAll(t *testing.T, acks <-chan handler.Ack, p *partition) {
	t.Helper()
	testwait.For(t, 10*time.Second, "every admitted record finished", func() bool {
		for {
			select {
			case a := <-acks:
				a.Done(nil)
			default:
				return p.pending.Load() == 0
			}
		}
	})
}

// pollRound does what one round of the poll loop does with fetches fps.
func (r *Receiver) pollRound(fps ...kgo.FetchTopicPartition) {
	_, _, total := r.heldState()
	n := 0
	for _, fp := range fps {
		n += len(fp.Records)
	}
	budget := r.reserve(int64(total + n))
	r.admitHeld(&budget)
	r.admitFetches(fps, &budget)
	r.pauseHolding()
	r.inFlight.Add(-budget)
}

// holdingEntries counts p in r.holding.
func (r *Receiver) holdingEntries(p *partition) (n int) {
	for _, q := range r.holding {
		if q == p {
			n++
		}
	}
	return n
}

// A partition is listed once among those holding records, also when all of
// its held records went in and the same poll brought more of it (a second
// entry made the held records count twice: the receiver stopped fetching
// at half its bound). Found by review; polls driven by hand.
func TestHoldingListsAPartitionOnce(t *testing.T) {
	h := newHarness(t, 2)
	acks := make(chan handler.Ack, 1000)
	hd := handlerFunc(func(_ context.Context, _ *handler.Message, ack handler.Ack) { acks <- ack })
	r := h.receiver("g-zz-dup", hd, 64)
	stop(t, r)
	r.stopping.Store(false)
	r.closing.Store(false)
	r.onAssigned(context.Background(), r.cl, map[string][]int32{testTopic: {0, 1}})
	p := r.parts[tp{testTopic, 0}]
	ack := func(n int) {
		for range n {
			(<-acks).Done(nil)
		}
		testwait.For(t, 5*time.Second, "acks", func() bool { return len(acks) == int(p.pending.Load()) })
	}
	r.pollRound(heldFetch(0, 0, 40, 1))
	testwait.For(t, 5*time.Second, "first", func() bool { return len(acks) == 32 })
	off := int64(40)
	for i := 0; i < 5; i++ {
		ack(int(p.pending.Load())) // all of them: the held ones all go in next round
		r.pollRound(heldFetch(0, off, off+40, 1))
		off += 40
		_, _, total := r.heldState()
		if n := r.holdingEntries(p); n != 1 || total != len(p.held) {
			t.Fatalf("round %d: partition 0 listed %d times, %d records counted held for %d", i, n, total, len(p.held))
		}
	}
	finishAll(t, acks, p)
	r.closePartition(p)
	r.closePartition(r.parts[tp{testTopic, 1}])
}

// A partition that cannot take its held records in (its stuck records keep
// it a little below its share) while they fill the client's part of the
// memory budget gives them back: otherwise no partition would be fetched
// until its stuck records finish. Found by review; polls driven by hand.
func TestStuckPartitionGivesItsHeldRecordsBack(t *testing.T) {
	h := newHarness(t, 2)
	acks := make(chan handler.Ack, 1000)
	hd := handlerFunc(func(_ context.Context, _ *handler.Message, ack handler.Ack) { acks <- ack })
	b, err := memory.New(memory.MinLimit, 1)
	if err != nil {
		t.Fatal(err)
	}
	r := h.receiver("g-zz-gap", hd, 64, func(o *Options) { o.Fetch = b.Join() })
	stop(t, r)
	r.stopping.Store(false)
	r.closing.Store(false)
	r.onAssigned(context.Background(), r.cl, map[string][]int32{testTopic: {0, 1}})
	p := r.parts[tp{testTopic, 0}]
	r.pollRound(heldFetch(0, 0, 40, 64<<10))
	testwait.For(t, 5*time.Second, "admitted", func() bool { return len(acks) == 32 })
	(<-acks).Done(nil)
	(<-acks).Done(nil) // two finish; the other 30 are stuck
	testwait.For(t, 5*time.Second, "finished", func() bool { return p.pending.Load() == 30 })
	ready, active, total := r.heldState()
	full := r.holdFull(active)
	if !full || ready || total == 0 {
		t.Fatalf("setup: full %v, ready %v, %d held: want full, not ready, records held", full, ready, total)
	}
	if !r.shedStuck() || len(p.held) != 0 || r.heldBytes.Load() != 0 {
		t.Fatalf("the stuck partition kept %d held records (%d bytes): every topic stays paused until its records finish", len(p.held), r.heldBytes.Load())
	}
	p.mu.Lock()
	paused := p.paused&pauseShare != 0
	p.mu.Unlock()
	if !paused {
		t.Fatal("the partition that gave its records back is not paused in the client")
	}
	finishAll(t, acks, p)
	r.closePartition(p)
	r.closePartition(r.parts[tp{testTopic, 1}])
}

// shedBehindActions builds a receiver of window 64, polled by hand, owning
// partitions 0 and 1, whose partition 0 has its share (32) taken by
// operators' actions waiting for a running slot, then holds fetched records
// that fill the receiver's part of the smallest memory budget, and gives
// them back (shedStuck): paused for its share. endActions lets the actions
// run and end.
func shedBehindActions(t *testing.T, group string) (*Receiver, *partition) {
	t.Helper()
	h := newHarness(t, 2)
	hd := handlerFunc(func(_ context.Context, _ *handler.Message, ack handler.Ack) { ack.Done(nil) })
	b, err := memory.New(memory.MinLimit, 1)
	if err != nil {
		t.Fatal(err)
	}
	r := h.receiver(group, hd, 64, func(o *Options) { o.Fetch = b.Join() })
	stop(t, r) // polls driven by hand
	r.stopping.Store(false)
	r.closing.Store(false)
	r.onAssigned(context.Background(), r.cl, map[string][]int32{testTopic: {0, 1}})
	p := r.parts[tp{testTopic, 0}]

	// The least parking state startAction and parkAction use.
	r.park = &parkState{parked: make(map[parkKey]*parkedAgg), loaded: make(map[tp]bool), book: park.NewBook(),
		handParking: make(map[parkKey]*partition), actions: make(chan struct{}, maxActions), ready: make(chan struct{})}
	for range maxActions {
		r.park.actions <- struct{}{} // every running slot taken: the actions wait, counted in p's share
	}
	for i := range shedActions {
		r.startAction(parkKey{testTopic, "parked-" + strconv.Itoa(i)}, p, nil, park.Request{Action: park.Redrive, ID: strconv.Itoa(i)})
	}
	if n := p.pending.Load(); n != shedActions {
		t.Fatalf("setup: pending %d", n)
	}
	r.pollRound(heldFetch(0, 0, 40, 64<<10)) // p's records: held, its share is taken
	ready, active, total := r.heldState()
	if !r.holdFull(active) || ready || total != 40 {
		t.Fatalf("setup: full %v ready %v total %d", r.holdFull(active), ready, total)
	}
	if !r.shedStuck() {
		t.Fatal("setup: nothing shed")
	}
	return r, p
}

// shedActions are the actions of shedBehindActions: the share of a 64
// window over two partitions.
const shedActions = 32

// endActions lets the actions of shedBehindActions run; their aggregates
// are not parked, so each ends at once.
func endActions(r *Receiver) {
	for range maxActions {
		<-r.park.actions
	}
	r.park.wg.Wait()
}

// sharePaused reports whether p is paused for its share, and the
// partitions the client has paused.
func sharePaused(r *Receiver, p *partition) (bool, []int32) {
	p.mu.Lock()
	paused := p.paused&pauseShare != 0
	p.mu.Unlock()
	return paused, r.cl.PauseFetchPartitions(nil)[testTopic]
}

// A partition that gave its held records back (shedStuck) while its share
// was taken by operators' actions on parked aggregates fetches again once
// the actions end: the last decrement of its unfinished count lifts the
// pause, whatever ended (here an action, not a record), since nothing else
// would for a partition that holds nothing.
func TestShedPartitionResumesWhenItsActionsEnd(t *testing.T) {
	r, p := shedBehindActions(t, "g-shed-act")
	endActions(r)
	testwait.For(t, 5*time.Second, "actions ended", func() bool { return p.pending.Load() == 0 })
	for range 3 {
		r.pollRound() // the poll loop's rounds: nothing of p comes, the client has it paused
	}
	if paused, client := sharePaused(r, p); paused {
		t.Errorf("partition 0: nothing unfinished, nothing held, still paused (client pauses %v): never fetched again until a rebalance", client)
	}
	r.closePartition(p)
	r.closePartition(r.parts[tp{testTopic, 1}])
}

// A partition that gave its held records back (shedStuck) fetches again
// when its share grows to twice what it has unfinished (the other
// partition is revoked), without any of its unfinished work ending: found
// by review, it stayed paused until then.
func TestShedPartitionResumesWhenItsShareGrows(t *testing.T) {
	r, p := shedBehindActions(t, "g-shed-grow")
	// The other partition goes: p alone may hold the whole window, and
	// its actions, still waiting, take half of it.
	// (onRevoked's steps, without the parking state it unloads.)
	r.commitMu.lock()
	for _, q := range r.take(map[string][]int32{testTopic: {1}}) {
		r.closePartition(q)
	}
	r.commitMu.unlock()
	r.recheckShares()
	if n := p.pending.Load(); n != shedActions {
		t.Fatalf("pending %d, want the %d actions still waiting", n, shedActions)
	}
	if paused, client := sharePaused(r, p); paused {
		t.Errorf("partition 0: alone, with half the window unfinished and nothing held, still paused (client pauses %v)", client)
	}
	endActions(r)
	r.closePartition(p)
}

// A stopped receiver counts no held records in its buffered bytes: the
// poll loop, which alone drops held records, lets them go as it ends.
// wowd_receiver_buffered_bytes read 0 from a stopped receiver's client but
// kept its held records' bytes, and the records stayed referenced.
func TestAStoppedReceiverHoldsNothing(t *testing.T) {
	h := newHarness(t, 2)
	produce(t, h.c, testTopic, 400, 400)
	acks := make(chan handler.Ack, 1000)
	hd := handlerFunc(func(_ context.Context, _ *handler.Message, ack handler.Ack) { acks <- ack })
	r := h.receiver("g-zz-stopheld", hd, 8)
	testwait.For(t, 10*time.Second, "records held beyond the window", func() bool { return r.heldBytes.Load() > 0 })
	stopped, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		<-r.pollDone // nothing finishes before: the held records stay held
		for {
			select {
			case a := <-acks:
				a.Done(nil)
			case <-stopped:
				return
			}
		}
	}()
	stop(t, r)
	close(stopped)
	<-done
	if n, b := r.heldBytes.Load(), r.Snapshot().BufferedBytes; n != 0 || b != 0 {
		t.Fatalf("after Stop: %d held bytes, %d buffered bytes reported; want 0", n, b)
	}
}
