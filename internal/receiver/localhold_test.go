package receiver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/park"
	"github.com/wowd/wowd/internal/testwait"
	"github.com/wowd/wowd/internal/wow/wowtest"
)

// The local-first ingest's order when a local record is given up
// (localhold.go): its copy goes to the owner of its partition, and the
// caller's next message of its aggregate must not be handled here before
// it. The tests play the ingest with ingest (below); two instances of one
// dispatcher are two receivers of one group.

// orderLog is a sink shared by two instances (receivers of one group and
// dispatcher): it records the sequence numbers it handled successfully, in
// the order the handler saw them, across both.
type orderLog struct {
	mu      sync.Mutex
	handled []uint64
	fail    func(seq uint64) bool // fails seq for good (after delay)
	delay   func(seq uint64) time.Duration
}

func (s *orderLog) Handle(_ context.Context, m *handler.Message, ack handler.Ack) {
	seq := binary.BigEndian.Uint64(m.Value)
	done := func() {
		if s.fail != nil && s.fail(seq) {
			ack.Done(handler.Classed(handler.Permanent, errors.New("rejected")))
			return
		}
		s.mu.Lock()
		s.handled = append(s.handled, seq)
		s.mu.Unlock()
		ack.Done(nil)
	}
	if d := s.delay(seq); d > 0 {
		time.AfterFunc(d, done)
		return
	}
	done()
}

func (s *orderLog) seen() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.handled)
}

// ingest does what internal/ingest does with one receiver: admit the
// record (key agg, value seq), wait until it is finished or given up, then
// publish it, marked as handled by dispatcher "d" of service "svc" only if
// it was finished, and otherwise tell the receiver where its copy went. It
// reports whether the receiver finished it.
func ingest(t *testing.T, h *harness, r *Receiver, seq uint64) bool {
	t.Helper()
	v := binary.BigEndian.AppendUint64(nil, seq)
	return ingestValue(t, h, r, "agg", v)
}

func ingestValue(t *testing.T, h *harness, r *Receiver, key string, v []byte) bool {
	t.Helper()
	a, err := r.Admit(context.Background(), &kgo.Record{Topic: testTopic, Key: []byte(key), Value: v})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("ingested %s never finished nor given up", key)
	}
	out := &kgo.Record{Topic: testTopic, Key: []byte(key), Value: v}
	if a.Finished() {
		out.Headers = []kgo.RecordHeader{{Key: HeaderHandledBy, Value: []byte("svc")}, {Key: HeaderHandledDispatchers, Value: []byte("d")}}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	res := cl.ProduceSync(context.Background(), out)
	if err := res.FirstErr(); err != nil {
		t.Fatal(err)
	}
	a.Published(res[0].Record.Partition, res[0].Record.Offset)
	return a.Finished()
}

// TestALocalRecordGivenUpAtStartIsNotOvertaken: parking on, two instances
// of dispatcher d (A owns the only partition, B owns none, as with more
// instances than partitions). The ingest of B takes #0 of an aggregate
// while B's parked state is still being read (B just started): B gives it
// up, the ingest publishes it unmarked, for the owner A, which has a
// backlog (here: its sink takes a second). The caller then sends #1: B
// gives it up too, since #0's copy is not committed yet, and A handles
// both in order. (Found by review: B handled #1 at once, before #0.)
func TestALocalRecordGivenUpAtStartIsNotOvertaken(t *testing.T) {
	h := newHarness(t, 1)
	// Both instances log what they handle in one list: A's sink answers
	// after a second (its backlog), B's at once.
	var mu sync.Mutex
	var order []uint64
	sink := func(delay time.Duration) handler.Handler {
		return handlerFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
			time.AfterFunc(delay, func() {
				mu.Lock()
				order = append(order, binary.BigEndian.Uint64(m.Value))
				mu.Unlock()
				ack.Done(nil)
			})
		})
	}
	handled := func() []uint64 { mu.Lock(); defer mu.Unlock(); return slices.Clone(order) }
	a := h.receiver("g-review-local", sink(time.Second), 16, parking)
	defer stop(t, a)
	testwait.For(t, 30*time.Second, "A ready and owning the partition", func() bool { return a.Ready() && len(a.Partitions()) == 1 })

	b := h.newReceiver("g-review-local", sink(0), 16, parking)
	if finished := ingest(t, h, b, 0); finished {
		t.Fatal("#0 finished by B before its parked state was read")
	}
	b.Start(context.Background())
	defer stop(t, b)
	testwait.For(t, 30*time.Second, "B ready", b.Ready)
	if len(b.Partitions()) != 0 {
		t.Skip("B took the partition; the scenario needs A to keep it")
	}
	if ingest(t, h, b, 1) {
		t.Error("#1 finished by B while #0's copy waited for A")
	}
	testwait.For(t, 30*time.Second, "both handled", func() bool { return len(handled()) >= 2 })
	if got := handled(); !slices.Equal(got, []uint64{0, 1}) {
		t.Fatalf("aggregate agg handled in the order %v, want [0 1]: #0, given up by B while it read its parked state and published first, was handled by the partition's owner after B handled #1 locally", got)
	}
	// Once A committed past both copies, B handles the aggregate's
	// ingested messages itself again.
	testwait.For(t, 30*time.Second, "B to see the copies handled", func() bool { return !b.heldLocally(testTopic, "agg") })
	if !ingest(t, h, b, 2) {
		t.Fatal("#2 given up by B although the earlier copies were handled")
	}
	if got := handled(); !slices.Equal(got, []uint64{0, 1, 2}) {
		t.Fatalf("handled %v, want [0 1 2]", got)
	}
}

// TestALocalRecordFailingForGoodIsNotOvertaken: parking on, two instances
// as above. #0 is ingested at B and fails for good there: B gives it up (a
// local record is never parked), the ingest publishes it for the owner A,
// where it fails again (the sink takes 300ms to answer) and parks the
// aggregate. The caller sends #1 right after #0's answer: B gives it up
// too, and A parks it behind #0; once the sink is fixed and the aggregate
// redriven, #0 is handled, then #1. (Found by review: B handled #1 locally
// at once, its aggregate not parked yet as far as B knew: before #0.)
func TestALocalRecordFailingForGoodIsNotOvertaken(t *testing.T) {
	h := newHarness(t, 1)
	var brokenMu sync.Mutex
	broken := true
	isBroken := func() bool { brokenMu.Lock(); defer brokenMu.Unlock(); return broken }
	// One sink for both instances: it takes 300ms on #0 and rejects it while broken.
	sink := &orderLog{
		fail:  func(seq uint64) bool { return seq == 0 && isBroken() },
		delay: func(seq uint64) time.Duration { return map[bool]time.Duration{true: 300 * time.Millisecond}[seq == 0] },
	}
	a := h.receiver("g-review-park", sink, 16, parking)
	defer stop(t, a)
	testwait.For(t, 30*time.Second, "A ready and owning the partition", func() bool { return a.Ready() && len(a.Partitions()) == 1 })
	b := h.receiver("g-review-park", sink, 16, parking)
	defer stop(t, b)
	testwait.For(t, 30*time.Second, "B ready", b.Ready)
	if len(b.Partitions()) != 0 {
		t.Skip("B took the partition; the scenario needs A to keep it")
	}

	if finished := ingest(t, h, b, 0); finished {
		t.Fatal("#0 finished at B although it failed")
	}
	ingest(t, h, b, 1)
	testwait.For(t, 30*time.Second, "agg parked at the owner", func() bool { return h.parkedState("agg") != nil })
	brokenMu.Lock()
	broken = false
	brokenMu.Unlock()
	h.ask("agg", park.Redrive)
	testwait.For(t, 30*time.Second, "agg redriven and unparked", func() bool {
		return h.parkedState("agg") == nil && slices.Contains(sink.seen(), 0)
	})
	testwait.For(t, 30*time.Second, "#1 handled", func() bool { return len(sink.seen()) >= 2 })
	if got := sink.seen(); !slices.Equal(got, []uint64{0, 1}) {
		t.Fatalf("aggregate agg handled in the order %v, want [0 1]", got)
	}
	testwait.For(t, 30*time.Second, "B to see the copies handled", func() bool { return !b.heldLocally(testTopic, "agg") })
	if !ingest(t, h, b, 2) || !slices.Equal(sink.seen(), []uint64{0, 1, 2}) {
		t.Fatalf("#2 after the redrive: handled %v, want [0 1 2], #2 by B locally", sink.seen())
	}
}

// TestALocalRecordFailingForGoodIsDeadLetteredAtItsPosition: dead letters
// on, no parking. An ingested record fails for good: it is not
// dead-lettered locally (it has no position in Kafka yet, and its copy,
// published as handled here, would be skipped), but given up; its copy is
// published and dead-lettered by the owner of its partition with its
// position. (Found by review: its dead letter said partition 0, offset 0,
// another record's position, and a refused dead-letter write was reported
// finished, so its copy was skipped as handled here.) Before Start too:
// given up at once, with no dead-letter write waiting for Start.
func TestALocalRecordFailingForGoodIsDeadLetteredAtItsPosition(t *testing.T) {
	h := newHarness(t, 1)
	h.produceState(&kgo.Record{Topic: testTopic, Key: []byte("other"), Value: []byte("another aggregate's record")})
	r := h.newReceiver("g-local-dlq", handler.Sync(func(_ context.Context, m *handler.Message) error {
		if m.AggregateID == "agg" {
			return handler.Classed(handler.Permanent, errors.New("rejected"))
		}
		return nil
	}), 16)
	early, err := r.Admit(context.Background(), &kgo.Record{Topic: testTopic, Key: []byte("agg"), Value: []byte("before Start")})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-early.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a local record failing for good before Start neither finished nor given up")
	}
	if early.Finished() {
		t.Fatal("a local record failing for good before Start reported finished")
	}
	r.Start(context.Background())
	defer stop(t, r)
	if ingestValue(t, h, r, "agg", []byte("after Start")) {
		t.Fatal("a local record failing for good reported finished")
	}
	dl := dlqRecords(t, h.c, testTopic+".dlq", 1)
	if len(dl) != 1 {
		t.Fatalf("%d dead letters, want 1 (the published copy's)", len(dl))
	}
	src := dlqRecords(t, h.c, testTopic, 2)
	if p, o := header(dl[0], HeaderSourcePartition), header(dl[0], HeaderSourceOffset); p != "0" || o != "1" || string(dl[0].Value) != "after Start" ||
		len(src) != 2 || string(src[1].Value) != "after Start" {
		t.Fatalf("dead letter %q says its source is partition %s offset %s; want the copy's, partition 0 offset 1", dl[0].Value, p, o)
	}
}

// TestVersionCheckKeepsALocalEventGivenUpAtStart: one instance, parking and
// the version check on, a backlog at start (two slow records fill the
// window). The ingest takes cart-1's v1 while the receiver has not read its
// parked state: given up, published unmarked behind the backlog. Once ready,
// the ingest takes v2: given up too, since v1's copy is not committed yet;
// both are handled from Kafka, in order. (Found by review: v2 was handled
// locally at once, which recorded cart-1 at version 2, and v1, out of the
// backlog, was skipped as a duplicate: never handled.)
func TestVersionCheckKeepsALocalEventGivenUpAtStart(t *testing.T) {
	h := newHarness(t, 1)
	pub := func(key string, v int64, marked bool) {
		rec := &kgo.Record{Topic: testTopic, Key: []byte(key), Value: wowtest.EventStream("shop", "cart", key, v)}
		if marked {
			rec.Headers = []kgo.RecordHeader{{Key: HeaderHandledBy, Value: []byte("svc")}, {Key: HeaderHandledDispatchers, Value: []byte("d")}}
		}
		h.produceState(rec)
	}
	pub("slow-a", 1, false)
	pub("slow-b", 1, false)
	var mu sync.Mutex
	got := map[string][]int64{}
	sink := handlerFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
		d := time.Duration(0)
		if m.AggregateID != "cart-1" {
			d = 1500 * time.Millisecond
		}
		time.AfterFunc(d, func() {
			mu.Lock()
			got[m.AggregateID] = append(got[m.AggregateID], m.Wow.Version)
			mu.Unlock()
			ack.Done(nil)
		})
	})
	r := h.newReceiver("g-review-version", sink, 2, wowOpts, parking)
	ingest := func(v int64) {
		ingestValue(t, h, r, "cart-1", wowtest.EventStream("shop", "cart", "cart-1", v))
	}
	ingest(1) // given up: the parked state is not read yet
	r.Start(context.Background())
	defer stop(t, r)
	testwait.For(t, 30*time.Second, "ready", r.Ready)
	ingest(2)
	testwait.For(t, 30*time.Second, "everything committed", func() bool { return h.committedAtEnd("g-review-version") })
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got["cart-1"], []int64{1, 2}) {
		t.Fatalf("cart-1 handled versions %v, want [1 2]", got["cart-1"])
	}
}

// TestLocalHoldsRelease: a hold goes once the committed offset of its
// copy's partition is past the copy (the next to handle), not at it; an
// aggregate's later copy keeps it; holds of many aggregates hold few of
// the others (by hash, 8192 buckets), and none once committed.
func TestLocalHoldsRelease(t *testing.T) {
	r := &Receiver{holds: newLocalHolds(true), log: zap.NewNop()}
	r.holds.setBarrier(nil)
	committed := map[int32]int64{}
	release := func() {
		r.holds.release(func(topic string, p int32) (int64, bool) {
			o, ok := committed[p]
			return o, ok && topic == testTopic
		})
	}
	r.Published(testTopic, "a", 0, 5)
	if !r.heldLocally(testTopic, "a") {
		t.Fatal("a not held")
	}
	committed[0] = 5
	release()
	if !r.heldLocally(testTopic, "a") {
		t.Fatal("released with the copy itself the next to handle")
	}
	r.Published(testTopic, "a", 0, 9) // a later copy of a
	committed[0] = 6
	release()
	if !r.heldLocally(testTopic, "a") {
		t.Fatal("released while a later copy of a waits")
	}
	committed[0] = 10
	release()
	if r.heldLocally(testTopic, "a") || r.holds.waiting() {
		t.Fatal("still held with every copy committed")
	}

	const held = 2000
	for i := range held {
		r.Published(testTopic, "k"+strconv.Itoa(i), 1, int64(i))
	}
	others := 0
	for i := range 1000 {
		if r.heldLocally(testTopic, "other-"+strconv.Itoa(i)) {
			others++
		}
	}
	if n, _ := r.holds.count(); n > held || others > 300 {
		t.Fatalf("%d buckets held for %d aggregates, %d of 1000 other aggregates held: want at most %d and about a quarter", n, held, others, held)
	}
	committed[1] = held
	release()
	if n, _ := r.holds.count(); n != 0 || r.holds.waiting() {
		t.Fatalf("%d buckets held with every copy committed", n)
	}
}

// keyOn returns a key that Kafka's default partitioner places on partition
// p of testTopic's n partitions.
func keyOn(t *testing.T, p, n int) string {
	t.Helper()
	tp := kgo.StickyKeyPartitioner(nil).ForTopic(testTopic)
	for i := range 10000 {
		k := "agg-" + strconv.Itoa(i)
		if tp.Partition(&kgo.Record{Key: []byte(k)}, n) == p {
			return k
		}
	}
	t.Fatalf("no key on partition %d of %d", p, n)
	return ""
}

// TestLocalHoldStartBarrier: until the end offsets at start are read,
// every local record is held; then each aggregate until the group
// committed past the end of the partition its messages go to (copies an
// earlier process gave up may lie below), whatever the other partitions'.
func TestLocalHoldStartBarrier(t *testing.T) {
	r := &Receiver{holds: newLocalHolds(true), log: zap.NewNop()}
	on0, on1, on2 := keyOn(t, 0, 3), keyOn(t, 1, 3), keyOn(t, 2, 3)
	if !r.heldLocally(testTopic, on0) || !r.heldLocally(testTopic, on1) {
		t.Fatal("not held before the ends at start were read")
	}
	r.holds.setBarrier(map[tp]int64{{testTopic, 0}: 5, {testTopic, 1}: 3, {testTopic, 2}: 0})
	committed := map[int32]int64{0: 4}
	release := func() {
		r.holds.release(func(_ string, p int32) (int64, bool) { o, ok := committed[p]; return o, ok })
	}
	release()
	if _, all := r.holds.count(); !r.heldLocally(testTopic, on0) || !r.heldLocally(testTopic, on1) || !all {
		t.Fatal("not held with the group's commits below the ends at start")
	}
	if r.heldLocally(testTopic, on2) {
		t.Fatal("held on a partition that was empty at start")
	}
	if r.heldLocally("other-topic", on0) {
		t.Fatal("held on a topic without partitions at start")
	}
	committed[0] = 5
	release()
	if r.heldLocally(testTopic, on0) {
		t.Fatal("held with the group's commit at the end at start of its partition")
	}
	if _, all := r.holds.count(); !r.heldLocally(testTopic, on1) || !all {
		t.Fatal("released with its own partition's commit below its end at start")
	}
	committed[1] = 3
	release()
	if _, all := r.holds.count(); r.heldLocally(testTopic, on1) || all {
		t.Fatal("held with the group's commits at the ends at start")
	}
}

// TestKeysArePlacedAsTheIngestPublishes: the start barrier finds an
// aggregate's partition with Kafka's default partitioner; the ingest's
// producer (franz-go's default partitioner) must place its copies there.
func TestKeysArePlacedAsTheIngestPublishes(t *testing.T) {
	const n = 7
	c := newCluster(t, n, testTopic)
	cl, err := kgo.NewClient(brokers(c)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	h := newLocalHolds(true)
	ends := map[tp]int64{}
	for p := range n {
		ends[tp{testTopic, int32(p)}] = 1
	}
	h.setBarrier(ends)
	for i := range 300 {
		k := "cart-" + strconv.Itoa(i*7919)
		res := cl.ProduceSync(context.Background(), &kgo.Record{Topic: testTopic, Key: []byte(k)})
		if err := res.FirstErr(); err != nil {
			t.Fatal(err)
		}
		tps := h.parts[testTopic]
		if got, want := tps.key.Partition(&kgo.Record{Key: []byte(k)}, tps.n), int(res[0].Record.Partition); got != want {
			t.Fatalf("key %s placed on partition %d, published to %d", k, got, want)
		}
	}
}

// TestLocalHoldFromTheGiveUp: an aggregate is held from the moment a local
// record of it is given up, before its copy is published (a record of it
// admitted meanwhile, by a concurrent request, must not run ahead either);
// a copy not published holds nothing; a published one holds until it is
// committed past, also after the others were reported.
func TestLocalHoldFromTheGiveUp(t *testing.T) {
	r := &Receiver{holds: newLocalHolds(true), log: zap.NewNop()}
	r.holds.setBarrier(nil)
	committed := int64(0)
	release := func() { r.holds.release(func(string, int32) (int64, bool) { return committed, true }) }
	r.gaveUp(testTopic, "a")
	r.gaveUp(testTopic, "a")
	release()
	if !r.heldLocally(testTopic, "a") {
		t.Fatal("not held after a give-up, before its copy was reported")
	}
	r.notPublished(testTopic, "a")
	if !r.heldLocally(testTopic, "a") {
		t.Fatal("not held while a second give-up's copy is not reported")
	}
	r.published(testTopic, "a", 0, 7)
	committed = 7
	release()
	if !r.heldLocally(testTopic, "a") {
		t.Fatal("released before its copy was committed past")
	}
	committed = 8
	release()
	if r.heldLocally(testTopic, "a") || r.holds.waiting() {
		t.Fatal("held with every give-up reported and its copy committed past")
	}
	r.gaveUp(testTopic, "b")
	r.notPublished(testTopic, "b")
	if r.heldLocally(testTopic, "b") {
		t.Fatal("held for a copy never published")
	}

	// A record the receiver refused: held from the refusal, before the
	// copy is published (the ingest publishes only once the receivers
	// that took it are done), until the copy is committed past.
	r.Refused(testTopic, "c")
	if !r.heldLocally(testTopic, "c") {
		t.Fatal("not held after a refusal, before its copy was published")
	}
	r.Published(testTopic, "c", 0, 20)
	committed = 20
	release()
	if !r.heldLocally(testTopic, "c") {
		t.Fatal("a refused record's hold released before its copy was committed past")
	}
	committed = 21
	release()
	if r.heldLocally(testTopic, "c") {
		t.Fatal("a refused record's hold kept with its copy committed past")
	}
	r.Refused(testTopic, "d")
	r.NotPublished(testTopic, "d")
	if r.heldLocally(testTopic, "d") || r.holds.waiting() {
		t.Fatal("held for a refused record whose copy was never published")
	}
}

// TestALocalRecordGivenUpBeforeARestartIsNotOvertaken: two instances of dispatcher d, parking
// off (dead letters on, the harness's default). A owns the only partition
// and has a backlog (its sink takes 5s). The ingest of B takes #0 of an
// aggregate; it fails for good at B: B gives it up, the ingest publishes it
// unmarked, for A, and B holds the aggregate. B then restarts (a rolling
// deploy: its holds are in memory only). The caller sends #1 to the
// restarted B right after #0's answer: B gives it up too, since the group
// has not committed past the ends its topic had when B started (the start
// barrier), and A handles it after #0. (Found by review: the restarted B
// handled #1 locally at once, ahead of #0's copy.)
func TestALocalRecordGivenUpBeforeARestartIsNotOvertaken(t *testing.T) {
	h := newHarness(t, 1)
	var mu sync.Mutex
	var order []uint64
	handled := func() []uint64 { mu.Lock(); defer mu.Unlock(); return slices.Clone(order) }
	sink := func(delay time.Duration, failZero bool) handler.Handler {
		return handlerFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
			seq := binary.BigEndian.Uint64(m.Value)
			if failZero && seq == 0 {
				ack.Done(handler.Classed(handler.Permanent, errors.New("rejected")))
				return
			}
			time.AfterFunc(delay, func() {
				mu.Lock()
				order = append(order, seq)
				mu.Unlock()
				ack.Done(nil)
			})
		})
	}
	a := h.receiver("g-review5-restart", sink(5*time.Second, false), 16)
	defer stop(t, a)
	testwait.For(t, 30*time.Second, "A ready and owning the partition", func() bool { return a.Ready() && len(a.Partitions()) == 1 })

	b1 := h.receiver("g-review5-restart", sink(0, true), 16)
	testwait.For(t, 30*time.Second, "B ready", b1.Ready)
	if len(b1.Partitions()) != 0 {
		t.Skip("B took the partition; the scenario needs A to keep it")
	}
	if ingest(t, h, b1, 0) {
		t.Fatal("#0 finished at B although it failed")
	}
	if !b1.heldLocally(testTopic, "agg") {
		t.Fatal("#0 given up but agg not held")
	}
	stop(t, b1) // a restart of B: its holds go with it

	b2 := h.receiver("g-review5-restart", sink(0, true), 16)
	defer stop(t, b2)
	testwait.For(t, 30*time.Second, "restarted B ready", b2.Ready)
	if len(b2.Partitions()) != 0 {
		t.Skip("B took the partition; the scenario needs A to keep it")
	}
	ingest(t, h, b2, 1)
	testwait.For(t, 30*time.Second, "both handled", func() bool { return len(handled()) >= 2 })
	if got := handled(); !slices.Equal(got, []uint64{0, 1}) {
		t.Fatalf("aggregate agg handled in the order %v, want [0 1]: #0 was given up by B and published for A before B restarted; the restarted B handled #1 locally ahead of #0's copy", got)
	}
}

// TestVersionCheckKeepsALocalEventGivenUpAtStop: one instance (B, the
// owner of the only partition), the version check on, parking off. The
// ingest takes cart-1's v1; B is stopped (a rolling restart) before its
// handler finished it: given up, the ingest publishes it unmarked while
// draining. The caller got v1's 202 and sends v2 to the restarted B, whose
// ingest endpoint serves before its receivers start: v2 is handled locally
// at once, which recorded cart-1 at version 2, and v1's copy, polled
// afterwards, was skipped as a duplicate, never handled (found by review).
// Now v2 is given up until the group committed past the ends at start, so
// both are handled from Kafka, in order.
func TestVersionCheckKeepsALocalEventGivenUpAtStop(t *testing.T) {
	h := newHarness(t, 1)
	b1 := h.receiver("g-review5-version", handlerFunc(func(ctx context.Context, m *handler.Message, ack handler.Ack) {
		go func() { <-ctx.Done(); ack.Done(ctx.Err()) }() // v1 outlasts the stop's drain
	}), 16, wowOpts)
	testwait.For(t, 30*time.Second, "B ready and owning the partition", func() bool { return b1.Ready() && len(b1.Partitions()) == 1 })
	a, err := b1.Admit(context.Background(), &kgo.Record{Topic: testTopic, Key: []byte("cart-1"), Value: wowtest.EventStream("shop", "cart", "cart-1", 1)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_ = b1.Stop(ctx)
	cancel()
	<-a.Done()
	if a.Finished() {
		t.Fatal("v1 finished although the stop cut it short")
	}
	// The ingest's Drain: v1 published unmarked.
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	res := cl.ProduceSync(context.Background(), &kgo.Record{Topic: testTopic, Key: []byte("cart-1"), Value: wowtest.EventStream("shop", "cart", "cart-1", 1)})
	cl.Close()
	if err := res.FirstErr(); err != nil {
		t.Fatal(err)
	}
	a.Published(res[0].Record.Partition, res[0].Record.Offset)

	var mu sync.Mutex
	var got []int64
	b2 := h.newReceiver("g-review5-version", handlerFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
		mu.Lock()
		got = append(got, m.Wow.Version)
		mu.Unlock()
		ack.Done(nil)
	}), 16, wowOpts)
	ingestValue(t, h, b2, "cart-1", wowtest.EventStream("shop", "cart", "cart-1", 2)) // the restarted ingest serves before Start
	b2.Start(context.Background())
	defer stop(t, b2)
	testwait.For(t, 30*time.Second, "everything committed", func() bool { return h.committedAtEnd("g-review5-version") })
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("cart-1 handled versions %v, want [1 2]: v1, given up at the stop and published for the owner, was skipped as a duplicate after the restarted instance handled v2 locally", got)
	}
}

// TestLocalHoldStartBarrierIsLiftedByTheAggregatesOwnMessage: a new group
// that starts at the end (wow.kafka.start-offset: latest) on a topic with
// records commits nothing while its partitions stay quiet, so the start
// barrier stands for them (below their ends may lie copies that another
// member, started earlier, still handles: the group's commits are the only
// sign). It holds only the aggregates of those partitions, and the first
// ingested message of one, given up, goes to its partition and moves the
// group past the barrier there: its next message is handled locally, while
// an aggregate of the other partition is still held. (Before, the barrier
// held every aggregate until every partition moved on: on a quiet
// partition, for good.)
func TestLocalHoldStartBarrierIsLiftedByTheAggregatesOwnMessage(t *testing.T) {
	h := newHarness(t, 2)
	on0, on1 := keyOn(t, 0, 2), keyOn(t, 1, 2)
	h.produceState(
		&kgo.Record{Topic: testTopic, Key: []byte(on0), Value: []byte("before the group existed")},
		&kgo.Record{Topic: testTopic, Key: []byte(on1), Value: []byte("before the group existed")},
	)
	r := h.receiver("g-latest", handler.Sync(func(context.Context, *handler.Message) error { return nil }), 16, func(o *Options) {
		o.ClientOpts = append(o.ClientOpts,
			kgo.ConsumeStartOffset(kgo.NewOffset().AtEnd()),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
	})
	defer stop(t, r)
	testwait.For(t, 30*time.Second, "ready", r.Ready)
	testwait.For(t, 10*time.Second, "the ends at start read", func() bool {
		r.holds.mu.Lock()
		defer r.holds.mu.Unlock()
		return r.holds.barrierRead
	})
	if ingestValue(t, h, r, on0, []byte("first")) {
		t.Fatal("handled locally with the start barrier standing for its partition")
	}
	testwait.For(t, 10*time.Second, "its partition past the barrier", func() bool { return !r.heldLocally(testTopic, on0) })
	if !ingestValue(t, h, r, on0, []byte("second")) {
		t.Fatal("given up with its partition past the barrier")
	}
	if _, all := r.holds.count(); !all || !r.heldLocally(testTopic, on1) {
		t.Fatal("the other partition's aggregate not held: its partition is still quiet below its end at start")
	}
}

// TestLocalHoldStartBarrierWaitsForALiveOwner: with start-offset latest,
// a member C owns the only partition and started it at its end; it has
// committed nothing yet. The copy of #0 an earlier process of member B gave
// up at its stop lies there, and C handles it (slowly). The restarted B
// must hold the aggregate until C is done: no committed offset does not
// mean the group will not handle what lies below the end. (Found by
// review, against an attempt that skipped such partitions.)
func TestLocalHoldStartBarrierWaitsForALiveOwner(t *testing.T) {
	h := newHarness(t, 1)
	latest := func(o *Options) {
		o.ClientOpts = append(o.ClientOpts,
			kgo.ConsumeStartOffset(kgo.NewOffset().AtEnd()),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
	}
	var mu sync.Mutex
	var order []uint64
	gate := make(chan struct{})
	entered := make(chan struct{}, 1)
	sink := handler.Sync(func(_ context.Context, m *handler.Message) error {
		seq := binary.BigEndian.Uint64(m.Value)
		if m.Partition >= 0 && seq == 0 {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-gate
		}
		mu.Lock()
		order = append(order, seq)
		mu.Unlock()
		return nil
	})
	openGate := sync.OnceFunc(func() { close(gate) })
	defer openGate()
	c := h.receiver("g-live", sink, 16, latest)
	defer stop(t, c)
	testwait.For(t, 30*time.Second, "C ready", c.Ready)
	testwait.For(t, 10*time.Second, "C assigned the partition", func() bool { return c.Snapshot().AssignedPartitions == 1 })
	time.Sleep(500 * time.Millisecond) // C's start position (the end, 0) is listed
	h.produceState(&kgo.Record{Topic: testTopic, Key: []byte("agg"), Value: binary.BigEndian.AppendUint64(nil, 0)})
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("C never started handling the copy of #0")
	}
	b := h.receiver("g-live", sink, 16, latest)
	defer stop(t, b)
	testwait.For(t, 30*time.Second, "B ready", b.Ready)
	time.Sleep(3 * holdCheck)
	if !b.heldLocally(testTopic, "agg") {
		t.Fatal("B's start barrier lifted while C still handles #0's copy below the end at B's start")
	}
	openGate()
	testwait.For(t, 10*time.Second, "B's barrier lifted once C committed #0", func() bool { return !b.heldLocally(testTopic, "agg") })
	if !ingest(t, h, b, 1) {
		t.Fatal("#1 given up with #0 committed")
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(order, []uint64{0, 1}) {
		t.Fatalf("handled %v, want [0 1]", order)
	}
}

// TestLocalHoldStartBarrierStandingIsWarnedOf: a partition whose records
// read at start are not all finished (a slow handler) keeps the start
// barrier up until the group commits past them; a warning names it once
// the barrier has stood for a while, and the commit lifts it.
func TestLocalHoldStartBarrierStandingIsWarnedOf(t *testing.T) {
	defer func(d time.Duration) { barrierPatience = d }(barrierPatience)
	barrierPatience = time.Second
	h := newHarness(t, 1)
	h.produceState(&kgo.Record{Topic: testTopic, Key: []byte("old"), Value: []byte("slow to handle")})
	core, logs := observer.New(zap.InfoLevel)
	release := make(chan struct{})
	r := h.receiver("g-slow", handler.Sync(func(ctx context.Context, _ *handler.Message) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}), 16, func(o *Options) {
		o.Logger = zap.New(zapcore.NewTee(o.Logger.Core(), core))
	})
	defer stop(t, r)
	testwait.For(t, 30*time.Second, "the warning of a standing barrier", func() bool {
		return logs.FilterMessageSnippet("the start barrier still stands").Len() > 0
	})
	w := logs.FilterMessageSnippet("the start barrier still stands").All()[0]
	if got, want := fmt.Sprint(w.ContextMap()["waiting"]), "["+testTopic+"/0 past 0]"; got != want {
		t.Errorf("the warning names %s, want %s (the record at 0, the last read at start)", got, want)
	}
	close(release) // the record finishes: its commit lifts the barrier
	testwait.For(t, 10*time.Second, "the start barrier lifted", func() bool { _, all := r.holds.count(); return !all })
}

// TestAReportBeforeTheGiveUpCountsOnlyForItsOwnRecord: the ingest may
// report a copy before the receiver gives its record up (it stops waiting
// when it drains, and reports "not published" when it panics on the way).
// Such a report must not settle another message's give-up: request 1 of x
// was given up and its publish is under way when request 2's record, still
// running, is reported not published; x must stay held until request 1's
// copy is reported and finished, and request 2's later give-up must hold
// nothing. A copy reported published before its give-up holds its
// aggregate from the give-up until it is finished. (Found by review: the
// early report released x while request 1's copy was not published yet.)
func TestAReportBeforeTheGiveUpCountsOnlyForItsOwnRecord(t *testing.T) {
	r := &Receiver{holds: newLocalHolds(true), log: zap.NewNop()}
	r.holds.setBarrier(nil)
	committed := int64(0)
	release := func() { r.holds.release(func(string, int32) (int64, bool) { return committed, true }) }

	first, second := newLocalWait(testTopic, "x"), newLocalWait(testTopic, "x")
	first.giveUp(r)
	Admitted{w: second, r: r}.NotPublished()
	if !r.heldLocally(testTopic, "x") {
		t.Fatal("x released by request 2's report while request 1's copy is not published yet")
	}
	second.giveUp(r)
	Admitted{w: first, r: r}.Published(0, 7)
	Admitted{w: first, r: r}.NotPublished() // a second report: ignored
	committed = 8
	release()
	if r.heldLocally(testTopic, "x") || r.holds.waiting() {
		t.Fatal("x held with request 1's copy finished and request 2 never published")
	}

	early := newLocalWait(testTopic, "y")
	Admitted{w: early, r: r}.Published(0, 9)
	if r.heldLocally(testTopic, "y") {
		t.Fatal("y held for a record not given up")
	}
	early.giveUp(r)
	release()
	if !r.heldLocally(testTopic, "y") {
		t.Fatal("y not held after the give-up of a record whose copy was published before it, unfinished")
	}
	committed = 10
	release()
	if r.heldLocally(testTopic, "y") || r.holds.waiting() {
		t.Fatal("y held with its copy finished")
	}

	finished := newLocalWait(testTopic, "z")
	finished.finished(0)
	Admitted{w: finished, r: r}.Published(0, 11)
	if r.heldLocally(testTopic, "z") {
		t.Fatal("z held for a record finished here")
	}
}

// TestAnUnmatchedReportIsLogged: a report for an aggregate with no record
// given up counted is a defect (each give-up is reported once); it is
// logged, and releases nothing held for another aggregate of its bucket.
func TestAnUnmatchedReportIsLogged(t *testing.T) {
	core, logs := observer.New(zapcore.ErrorLevel)
	r := &Receiver{holds: newLocalHolds(true), log: zap.New(core)}
	r.holds.setBarrier(nil)
	r.NotPublished(testTopic, "a")
	r.Published(testTopic, "b", 0, 3)
	if n := logs.FilterMessageSnippet("no record given up here").Len(); n != 2 {
		t.Fatalf("%d unmatched reports logged, want 2", n)
	}
	r.Refused(testTopic, "c")
	r.NotPublished(testTopic, "c")
	if n := logs.Len(); n != 2 {
		t.Fatalf("a matched report logged: %v", logs.All())
	}
}
