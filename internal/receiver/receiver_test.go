package receiver

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/executor"
	"github.com/wowd/wowd/internal/testwait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testTopic = "wow.shop.cart.event"

func newCluster(t testing.TB, partitions int, topics ...string) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(partitions), topics...),
		kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(partitions))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// virtualNets maps a cluster made by newVirtualCluster to its network.
var virtualNets sync.Map

// newVirtualCluster is newCluster on kfake's in-memory network, for tests
// that run in a testing/synctest bubble: their waits and backoffs take no
// real time.
func newVirtualCluster(t testing.TB, partitions int, topics ...string) *kfake.Cluster {
	t.Helper()
	vn := new(kfake.VirtualNetwork)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(9092), kfake.ListenFn(vn.Listen),
		kfake.SeedTopics(int32(partitions), topics...), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(partitions))
	if err != nil {
		t.Fatal(err)
	}
	virtualNets.Store(c, vn)
	t.Cleanup(func() {
		c.Close()
		virtualNets.Delete(c)
	})
	return c
}

// brokers returns the client options that reach c.
func brokers(c *kfake.Cluster) []kgo.Opt {
	opts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
	if vn, ok := virtualNets.Load(c); ok {
		opts = append(opts, kgo.Dialer(vn.(*kfake.VirtualNetwork).DialContext))
	}
	return opts
}

// produce writes n records over keys aggregates; each record's value is its
// sequence number within its key (8 bytes, big endian).
func produce(t testing.TB, c *kfake.Cluster, topic string, n, keys int) {
	t.Helper()
	seq := make([]uint64, keys)
	produceValues(t, c, topic, n, keys, func(k int) []byte {
		v := binary.BigEndian.AppendUint64(nil, seq[k])
		seq[k]++
		return v
	})
}

// produceValues writes n records over keys aggregates ("agg-<k>"), record i
// to key i%keys with the value value(k) returns.
func produceValues(t testing.TB, c *kfake.Cluster, topic string, n, keys int, value func(k int) []byte) {
	t.Helper()
	cl, err := kgo.NewClient(append(brokers(c), kgo.ProducerLinger(5*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const chunk = 5000
	for i := 0; i < n; i += chunk {
		var recs []*kgo.Record
		for j := i; j < min(n, i+chunk); j++ {
			k := j % keys
			recs = append(recs, &kgo.Record{Topic: topic, Key: []byte("agg-" + strconv.Itoa(k)), Value: value(k)})
		}
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// recorder is a handler that checks per-aggregate order and exclusivity and
// completes synchronously or asynchronously at random.
type recorder struct {
	mu       sync.Mutex
	seen     map[string][]uint64 // key -> values in handling order
	running  sync.Map            // key -> *atomic.Int32
	overlaps atomic.Int64
	total    atomic.Int64
	delay    time.Duration // every call waits this long (asynchronously)
	randomly bool          // mix synchronous and asynchronous completions
}

func newRecorder() *recorder { return &recorder{seen: make(map[string][]uint64)} }

func (h *recorder) Handle(_ context.Context, m *handler.Message, ack handler.Ack) {
	v, _ := h.running.LoadOrStore(m.AggregateID, new(atomic.Int32))
	run := v.(*atomic.Int32)
	if run.Add(1) != 1 {
		h.overlaps.Add(1)
	}
	key, val := m.AggregateID, binary.BigEndian.Uint64(m.Value)
	finish := func() {
		h.mu.Lock()
		h.seen[key] = append(h.seen[key], val)
		h.mu.Unlock()
		h.total.Add(1)
		run.Add(-1)
		ack.Done(nil)
	}
	switch {
	case h.delay > 0:
		time.AfterFunc(h.delay, finish)
	case h.randomly && rand.IntN(2) == 0:
		go finish()
	default:
		finish()
	}
}

// firstDeliveriesInOrder checks that, per key, the first time each value was
// seen the values increase by one; it returns the duplicate count.
func (h *recorder) check(t *testing.T, keys, perKey int) (dups int) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := h.overlaps.Load(); n > 0 {
		t.Errorf("%d times a key ran twice at once", n)
	}
	for k := range keys {
		key := "agg-" + strconv.Itoa(k)
		var next uint64
		for _, v := range h.seen[key] {
			switch {
			case v == next:
				next++
			case v < next:
				dups++
			default:
				t.Fatalf("key %s: value %d handled before %d", key, v, next)
			}
		}
		if int(next) != perKey {
			t.Fatalf("key %s: %d of %d values handled", key, next, perKey)
		}
	}
	return dups
}

type harness struct {
	t  testing.TB
	c  *kfake.Cluster
	ex *executor.Executor
}

func (h *harness) receiver(group string, hd handler.Handler, window int, extra ...func(*Options)) *Receiver {
	h.t.Helper()
	r := h.newReceiver(group, hd, window, extra...)
	r.Start(context.Background())
	return r
}

// newReceiver is receiver without Start: the client joins and fetches,
// nothing is polled.
func (h *harness) newReceiver(group string, hd handler.Handler, window int, extra ...func(*Options)) *Receiver {
	h.t.Helper()
	g := h.ex.Group(false)
	o := Options{
		Dispatcher: "d", Context: "shop", Service: "svc", GroupID: group, Ingest: true,
		Routes:         map[string]Route{testTopic: {Context: "shop", Aggregate: "cart", Kind: handler.KindEvent, Group: g}},
		MaxInFlight:    window,
		CommitInterval: 50 * time.Millisecond,
		RevokeTimeout:  5 * time.Second,
		Handler:        hd,
		HandlerType:    "test",
		DeadLetter:     DeadLetter{Enabled: true, Topic: func(s string) string { return s + ".dlq" }},
		ClientOpts: append(brokers(h.c),
			kgo.FetchMaxWait(100*time.Millisecond),
			kgo.ConsumeStartOffset(kgo.NewOffset().AtStart()),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.HeartbeatInterval(200*time.Millisecond),
			kgo.FetchMaxBytes(1<<20),
		),
		Logger: zaptest.NewLogger(h.t),
	}
	for _, f := range extra {
		f(&o)
	}
	r, err := New(o)
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

func newHarness(t *testing.T, partitions int) *harness {
	return harnessOn(t, newCluster(t, partitions, testTopic))
}

// newVirtualHarness is newHarness for a test in a testing/synctest bubble.
func newVirtualHarness(t *testing.T, partitions int) *harness {
	return harnessOn(t, newVirtualCluster(t, partitions, testTopic))
}

func harnessOn(t *testing.T, c *kfake.Cluster) *harness {
	h := &harness{t: t, c: c, ex: executor.New(executor.Options{Workers: 4})}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.ex.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return h
}

func stop(t testing.TB, r *Receiver) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := r.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// committedAtEnd reports whether group has committed every partition up to
// its end.
func (h *harness) committedAtEnd(group string) bool {
	committed, end := h.offsets(group)
	for p, e := range end {
		if committed[p] != e {
			return false
		}
	}
	return true
}

// requireCommittedAtEnd fails the test unless group committed every
// partition up to its end.
func (h *harness) requireCommittedAtEnd(group string) {
	h.t.Helper()
	committed, end := h.offsets(group)
	for p, e := range end {
		if committed[p] != e {
			h.t.Fatalf("partition %d committed %d, end %d", p, committed[p], e)
		}
	}
}

// committed returns the group's committed offsets and the topic's end offsets.
func (h *harness) offsets(group string) (committed, end map[int32]int64) {
	h.t.Helper()
	cl, err := kgo.NewClient(brokers(h.c)...)
	if err != nil {
		h.t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	os, err := adm.FetchOffsets(ctx, group)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		h.t.Fatal(err)
	}
	ends, err := adm.ListEndOffsets(ctx, testTopic)
	if err != nil {
		h.t.Fatal(err)
	}
	committed, end = map[int32]int64{}, map[int32]int64{}
	os.Each(func(o kadm.OffsetResponse) { committed[o.Partition] = o.At })
	ends.Each(func(o kadm.ListedOffset) { end[o.Partition] = o.Offset })
	return committed, end
}

func TestEveryRecordInOrderAndCommitted(t *testing.T) {
	const (
		records = 100_000
		keys    = 1_000
	)
	h := newHarness(t, 8)
	produce(t, h.c, testTopic, records, keys)
	rec := newRecorder()
	rec.randomly = true
	r := h.receiver("g-all", rec, 512)
	testwait.For(t, 60*time.Second, "every record handled", func() bool { return rec.total.Load() >= records })
	stop(t, r)
	if dups := rec.check(t, keys, records/keys); dups != 0 {
		t.Fatalf("%d duplicates without any rebalance", dups)
	}
	h.requireCommittedAtEnd("g-all")
}

func TestWindowBoundsUnfinishedRecords(t *testing.T) {
	const (
		records = 3_000
		keys    = 3_000 // every record its own key: only the window limits concurrency
		window  = 64
	)
	h := newHarness(t, 4)
	produce(t, h.c, testTopic, records, keys)
	rec := newRecorder()
	rec.delay = 20 * time.Millisecond
	var inFlight atomic.Int64
	r := h.receiver("g-window", countingHandler{rec, &inFlight}, window)
	var maxSeen, maxBuffered int64
	var sawPaused, sawResumed bool
	testwait.For(t, 60*time.Second, "every record handled", func() bool {
		maxSeen = max(maxSeen, inFlight.Load(), int64(r.InFlight()))
		maxBuffered = max(maxBuffered, r.cl.BufferedFetchRecords())
		if r.Snapshot().Paused {
			sawPaused = true
		} else if sawPaused {
			sawResumed = true
		}
		return rec.total.Load() >= records
	})
	stop(t, r)
	if maxSeen > window {
		t.Fatalf("%d unfinished records seen, window is %d", maxSeen, window)
	}
	if maxSeen < window/2 {
		t.Fatalf("at most %d unfinished records seen: the window of %d was not used", maxSeen, window)
	}
	if !sawPaused || !sawResumed {
		t.Fatalf("fetching paused=%v resumed=%v, want both", sawPaused, sawResumed)
	}
	// One fetch of at most FetchMaxBytes (1 MiB of 8-byte records, with
	// overhead) may be buffered; lag must not pile up in the client.
	if maxBuffered > 20_000 {
		t.Fatalf("client buffered %d records", maxBuffered)
	}
	rec.check(t, keys, 1)
}

// countingHandler counts calls in progress around another handler.
type countingHandler struct {
	h *recorder
	n *atomic.Int64
}

func (c countingHandler) Handle(ctx context.Context, m *handler.Message, ack handler.Ack) {
	c.n.Add(1)
	c.h.Handle(ctx, m, handler.AckFunc(func(err error) { c.n.Add(-1); ack.Done(err) }))
}

func TestRebalanceLosesNothing(t *testing.T) {
	const (
		records = 40_000
		keys    = 500
	)
	h := newHarness(t, 8)
	produce(t, h.c, testTopic, records, keys)
	rec := newRecorder()
	rec.delay = 200 * time.Microsecond
	a := h.receiver("g-rebalance", rec, 256)
	testwait.For(t, 30*time.Second, "a quarter handled", func() bool { return rec.total.Load() >= records/4 })
	b := h.receiver("g-rebalance", rec, 256)
	testwait.For(t, 30*time.Second, "b to get partitions", func() bool { return b.Snapshot().AssignedPartitions > 0 })
	testwait.For(t, 30*time.Second, "three quarters handled", func() bool { return rec.total.Load() >= 3*records/4 })
	stop(t, b) // b leaves: a takes everything back
	testwait.For(t, 60*time.Second, "every record handled", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		n := 0
		for _, vs := range rec.seen {
			seen := map[uint64]bool{}
			for _, v := range vs {
				seen[v] = true
			}
			n += len(seen)
		}
		return n >= records
	})
	stop(t, a)
	dups := rec.check(t, keys, records/keys)
	t.Logf("duplicates after two rebalances: %d", dups)
	if dups > 2*256 {
		t.Fatalf("%d duplicates, more than the two windows that revokes could drop", dups)
	}
	h.requireCommittedAtEnd("g-rebalance")
}

func TestCrashRedeliversAfterLastCommit(t *testing.T) {
	const (
		records = 2_000
		keys    = 50
	)
	h := newHarness(t, 4)
	produce(t, h.c, testTopic, records, keys)
	rec := newRecorder()
	var calls atomic.Int64
	gate := make(chan struct{})
	blocking := handler.Sync(func(ctx context.Context, m *handler.Message) error {
		if calls.Add(1) > records/2 {
			select { // stall the second half: the crash happens mid-stream
			case <-gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	a := h.receiver("g-crash", asyncHandler{blocking}, 128, func(o *Options) { o.CommitInterval = 20 * time.Millisecond })
	testwait.For(t, 30*time.Second, "half handled", func() bool { return calls.Load() > records/2 })
	time.Sleep(200 * time.Millisecond) // let a commit land
	// Crash: the client goes away without a final commit.
	a.crash()
	committedBefore, _ := h.offsets("g-crash")
	close(gate)

	b := h.receiver("g-crash", rec, 128)
	var expected int64
	_, end := h.offsets("g-crash")
	for p, e := range end {
		expected += e - committedBefore[p]
	}
	testwait.For(t, 30*time.Second, "redelivery", func() bool { return rec.total.Load() >= expected })
	time.Sleep(100 * time.Millisecond)
	stop(t, b)
	if got := rec.total.Load(); got != expected {
		t.Fatalf("redelivered %d records, want exactly the %d after the last commit", got, expected)
	}
	// What was redelivered is exactly the offsets after the commit.
	h.requireCommittedAtEnd("g-crash")
	if expected == 0 || expected == records {
		t.Fatalf("redelivered %d of %d: the crash did not land mid-stream", expected, records)
	}
}

// asyncHandler runs a blocking function off the caller's goroutine.
type asyncHandler struct{ f handler.Sync }

func (a asyncHandler) Handle(ctx context.Context, m *handler.Message, ack handler.Ack) {
	go func() { ack.Done(a.f(ctx, m)) }()
}

// crash ends the receiver as a killed process would: no drain, no final
// commit.
func (r *Receiver) crash() {
	r.stopping.Store(true)
	r.closing.Store(true)
	r.pollCancel()
	<-r.pollDone
	close(r.commitStop)
	<-r.commitDone
	close(r.watchStop)
	<-r.watchDone
	close(r.holdStop)
	<-r.holdDone
	r.partsMu.Lock()
	for k, p := range r.parts {
		p.closed.Store(true) // no final revoke, no lifted pause: the process is gone
		p.cancel()
		delete(r.parts, k)
	}
	r.partsMu.Unlock()
	r.cl.Close()
}
