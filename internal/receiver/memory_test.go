package receiver

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/memory"
	"github.com/wowd/wowd/internal/testwait"
	"github.com/wowd/wowd/internal/wow/wowtest"
)

// A receiver behind a stuck handler holds, besides its window, no more
// fetched records than its part of the memory budget, decompressed: the
// client's fetch limits count compressed bytes, and Wow JSON compresses
// about eight times. Without the budget the same client buffers the
// whole backlog its configured limits allow.
func TestFetchedRecordsStayWithinTheMemoryBudget(t *testing.T) {
	const (
		partitions = 4
		records    = 12_000 // ~5.6 MB of Wow event streams, decompressed
		// A window large enough that a partition's share does not bound
		// its fetches (see Receiver.fitFetch): the budget alone does.
		window = 2048
	)
	c := newCluster(t, partitions, testTopic)
	produceWow(t, c, records)
	for _, budgeted := range []bool{true, false} {
		t.Run(fmt.Sprintf("budget=%v", budgeted), func(t *testing.T) {
			h := harnessOn(t, c)
			b, err := memory.New(32<<20, 1) // 335 KB for fetched records
			if err != nil {
				t.Fatal(err)
			}
			release := make(chan struct{})
			var handled atomic.Int64
			hd := handlerFunc(func(ctx context.Context, _ *handler.Message, ack handler.Ack) {
				select {
				case <-release:
				case <-ctx.Done():
				}
				handled.Add(1)
				ack.Done(nil)
			})
			r := h.receiver(fmt.Sprintf("g-budget-%v", budgeted), hd, window, func(o *Options) {
				o.ClientOpts = append(o.ClientOpts, kgo.FetchMaxBytes(16<<20), kgo.FetchMaxPartitionBytes(1<<20))
				o.HandlerTimeout = time.Minute
				if budgeted {
					o.Fetch = b.Join()
				}
			})
			// The window fills, then the client keeps what it fetched
			// ahead: watch the most it holds for a while.
			testwait.For(t, 30*time.Second, "a full window", func() bool { return r.Snapshot().InFlight >= window*15/16 })
			var most int64
			for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
				most = max(most, r.Snapshot().BufferedBytes)
			}
			close(release)
			testwait.For(t, 30*time.Second, "every record handled", func() bool {
				most = max(most, r.Snapshot().BufferedBytes)
				return handled.Load() == records
			})
			stop(t, r)
			// The bound: the part, plus a batch or two (a fetch always
			// returns its first batch whole, and the limits follow the
			// observed compression with a lag) of at most 64 KB
			// decompressed each.
			bound := b.FetchBytes() + 128<<10
			t.Logf("most buffered %d bytes; the budget's part %d", most, b.FetchBytes())
			if budgeted && most > bound {
				t.Fatalf("the client held %d bytes of fetched records; the budget allows %d (+ two batches)", most, b.FetchBytes())
			}
			if !budgeted && most <= bound {
				t.Fatalf("without the budget the client held only %d bytes: the test does not show the budget's effect", most)
			}
			if budgeted {
				if got := r.Snapshot().FetchMaxBytes; got <= 0 || got > b.FetchBytes()/4 {
					t.Fatalf("fetch limit %d after reading 8x compressed data; want about %d / 8", got, b.FetchBytes())
				}
			}
		})
	}
}

// produceWow writes records Wow event streams of testTopic, snappy
// compressed in batches of at most 64 KB, 1,000 aggregates.
func produceWow(t *testing.T, c interface{ ListenAddrs() []string }, records int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(5*time.Millisecond),
		kgo.ProducerBatchCompression(kgo.SnappyCompression()), kgo.ProducerBatchMaxBytes(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const chunk = 4000
	for i := 0; i < records; i += chunk {
		var recs []*kgo.Record
		for j := i; j < min(records, i+chunk); j++ {
			id := fmt.Sprintf("agg-%d", j%1000)
			recs = append(recs, &kgo.Record{Topic: testTopic, Key: []byte(id), Value: wowtest.EventStream("shop", "cart", id, int64(j))})
		}
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// Six receivers of one budget, on a topic of 12 partitions with a handler
// that takes 20 ms per message (so windows fill and drain, and partitions
// pause and resume): what their clients hold together stays within the
// budget's fetch share, plus a batch per receiver.
func TestReceiversShareTheMemoryBudget(t *testing.T) {
	const (
		receivers = 6
		records   = 30_000
	)
	c := newCluster(t, 12, testTopic)
	produceWow(t, c, records)
	h := harnessOn(t, c)
	b, err := memory.New(32<<20, 10) // 3.3 MB for all six
	if err != nil {
		t.Fatal(err)
	}
	var rs []*Receiver
	for i := range receivers {
		hd := handlerFunc(func(_ context.Context, _ *handler.Message, ack handler.Ack) {
			time.AfterFunc(20*time.Millisecond, func() { ack.Done(nil) })
		})
		rs = append(rs, h.receiver(fmt.Sprintf("g-share-%d", i), hd, 256, func(o *Options) {
			o.ClientOpts = append(o.ClientOpts, kgo.FetchMaxBytes(16<<20), kgo.FetchMaxPartitionBytes(1<<20))
			o.Fetch = b.Join() // without: 16 MB held together
		}))
	}
	var most int64
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		var sum int64
		for _, r := range rs {
			sum += r.Snapshot().BufferedBytes
		}
		most = max(most, sum)
	}
	for _, r := range rs {
		stop(t, r)
	}
	t.Logf("six receivers held at most %d bytes of fetched records together; the share is %d", most, b.FetchBytes())
	if bound := b.FetchBytes() + receivers*64<<10; most > bound {
		t.Fatalf("six receivers held %d bytes of fetched records; the budget's share is %d (+ a batch each)", most, b.FetchBytes())
	}
	if most == 0 {
		t.Fatal("nothing was ever buffered: the test did not load the receivers")
	}
}

// batchRead signals a batch read by a client.
type batchRead chan struct{}

func (c batchRead) OnFetchBatchRead(kgo.BrokerMetadata, string, int32, kgo.FetchBatchMetrics) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// A client's first fetch is sized by the budget too, however late New gets
// to sizing it (a busy machine): the client joins the group and fetches as
// soon as it is made, and until New sized them its limits are the
// configured ones, here the whole topic. The receiver is not started, so
// nothing is polled: what the client buffers is its first fetch.
func TestTheFirstFetchStaysWithinTheBudget(t *testing.T) {
	c := newCluster(t, 12, testTopic)
	produceWow(t, c, 12_000) // ~5.6 MB decompressed
	h := harnessOn(t, c)
	b, err := memory.New(32<<20, 1) // 335 KB for fetched records
	if err != nil {
		t.Fatal(err)
	}
	read := make(batchRead, 1)
	hd := handlerFunc(func(_ context.Context, _ *handler.Message, ack handler.Ack) { ack.Done(nil) })
	r := h.newReceiver("g-first-fetch", hd, 256, func(o *Options) {
		o.ClientOpts = append(o.ClientOpts, kgo.FetchMaxBytes(16<<20), kgo.FetchMaxPartitionBytes(1<<20), kgo.WithHooks(read))
		o.Fetch = b.Join()
		// New sizes the fetches only once the client read a batch, or a
		// second later (the client joins and fetches well within it).
		o.afterClient = func(*kgo.Client) {
			select {
			case <-read:
			case <-time.After(time.Second):
			}
		}
	})
	defer stop(t, r)
	var first int64
	testwait.For(t, 30*time.Second, "a fetch buffered", func() bool {
		first = r.cl.BufferedFetchBytes() // one fetch, counted at once
		return first > 0
	})
	t.Logf("the first fetch holds %d bytes; the budget's part %d", first, b.FetchBytes())
	if bound := b.FetchBytes() + 64<<10; first > bound {
		t.Fatalf("the first fetch holds %d bytes of records; the budget allows %d (+ a batch)", first, b.FetchBytes())
	}
}

// batchCounter counts the records of the batches a client read.
type batchCounter struct{ records atomic.Int64 }

func (c *batchCounter) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.FetchBatchMetrics) {
	c.records.Add(int64(m.NumRecords))
}

// A receiver reads each record about once, also while its partitions
// reach their share of the window all the time (twelve partitions, a
// small window, a handler that takes a little while): the records a
// partition cannot admit yet wait in the receiver, where pausing the
// partition in the client would drop what it fetched, to be fetched and
// decompressed again.
func TestEachRecordIsFetchedOnce(t *testing.T) {
	const records = 24_000
	c := newCluster(t, 12, testTopic)
	produceWow(t, c, records)
	h := harnessOn(t, c)
	var read batchCounter
	var handled atomic.Int64
	hd := handlerFunc(func(_ context.Context, _ *handler.Message, ack handler.Ack) {
		if handled.Add(1)%64 == 0 {
			time.Sleep(time.Millisecond)
		}
		ack.Done(nil)
	})
	r := h.receiver("g-once", hd, 64, func(o *Options) {
		o.ClientOpts = append(o.ClientOpts, kgo.WithHooks(&read))
	})
	testwait.For(t, 60*time.Second, "every record finished", func() bool { return h.committedAtEnd("g-once") })
	stop(t, r)
	ratio := float64(read.records.Load()) / records
	t.Logf("read %d records for %d: %.2f×", read.records.Load(), records, ratio)
	if ratio > 1.25 {
		t.Fatalf("the client read %.2f× the records: partitions paused at their share drop and fetch them again", ratio)
	}
}

// ownBytes gives a record its own copy of its bytes: what the batch's
// buffer holds afterwards does not change the record, and the record
// points into nothing of the batch (no empty header slice either).
func TestOwnBytesCopiesTheRecordOutOfItsBatch(t *testing.T) {
	batch := []byte("key|value|h1|v1")
	hdrs := make([]kgo.RecordHeader, 1, 4)
	hdrs[0] = kgo.RecordHeader{Key: "h1", Value: batch[10:12]}
	rec := &kgo.Record{Key: batch[0:3], Value: batch[4:9], Headers: hdrs}
	ownBytes{}.OnFetchRecordBuffered(rec)
	clear(batch)
	hdrs[0] = kgo.RecordHeader{}
	if string(rec.Key) != "key" || string(rec.Value) != "value" || len(rec.Headers) != 1 ||
		rec.Headers[0].Key != "h1" || string(rec.Headers[0].Value) != "h1" {
		t.Fatalf("after the batch changed the record reads %q %q %+v", rec.Key, rec.Value, rec.Headers)
	}
	if cap(rec.Key) != len(rec.Key) || cap(rec.Value) != len(rec.Value) {
		t.Fatal("a copied slice can grow into its neighbour")
	}
	empty := &kgo.Record{Value: batch[:2], Headers: hdrs[:0]}
	ownBytes{}.OnFetchRecordBuffered(empty)
	if empty.Key != nil || empty.Headers != nil {
		t.Fatalf("a record without key or headers got %q and %v, want nil for both", empty.Key, empty.Headers)
	}
}

// ownsItsBytes reports whether m's key and value sit side by side in one
// allocation, as ownRecordBytes copies them: no batch of the wire format
// lays them out so (the value's length comes between them).
func ownsItsBytes(m *handler.Message) bool {
	return unsafe.Pointer(unsafe.SliceData(m.Value)) == unsafe.Add(unsafe.Pointer(unsafe.SliceData(m.Key)), len(m.Key))
}

// The receiver installs ownBytes: a handler's message owns its bytes.
func TestFetchedRecordsOwnTheirBytes(t *testing.T) {
	h := newHarness(t, 1)
	adjacent := make(chan bool, 8)
	hd := handler.Sync(func(_ context.Context, m *handler.Message) error {
		adjacent <- ownsItsBytes(m)
		return nil
	})
	r := h.receiver("g-own-bytes", hd, 16)
	defer stop(t, r)
	produce(t, h.c, testTopic, 8, 4)
	for range 8 {
		select {
		case ok := <-adjacent:
			if !ok {
				t.Fatal("a handled message points into its fetched batch, not into a copy of its own")
			}
		case <-time.After(30 * time.Second):
			t.Fatal("records not handled")
		}
	}
}

// The copy keeps a record's shape: a tombstone's value stays nil, and an
// empty value stays empty. (A record without a key reaches no handler.)
func TestCopiedRecordsKeepNilAndEmpty(t *testing.T) {
	h := newHarness(t, 1)
	type shape struct{ keyNil, valueNil bool }
	got := make(chan shape, 2)
	hd := handler.Sync(func(_ context.Context, m *handler.Message) error {
		got <- shape{m.Key == nil, m.Value == nil}
		return nil
	})
	r := h.receiver("g-nil-empty", hd, 16)
	defer stop(t, r)
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	recs := []*kgo.Record{
		{Topic: testTopic, Key: []byte("k"), Value: nil},
		{Topic: testTopic, Key: []byte("k"), Value: []byte{}},
	}
	want := []shape{{false, true}, {false, false}}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for i, w := range want { // one partition: in order
		select {
		case s := <-got:
			if s != w {
				t.Errorf("record %d: key nil %v, value nil %v; want %v, %v", i, s.keyNil, s.valueNil, w.keyNil, w.valueNil)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("record %d not handled", i)
		}
	}
}

// TestFirstFetchIsSizedForEveryBroker: each broker may hold one buffered
// fetch of the client's, so its fetch limit is its part divided among the
// brokers. The first fit, in New, ran before the client knew any broker
// and sized the fetch for one: with three brokers the first round could
// buffer three times the part. It counts the seed brokers now.
func TestFirstFetchIsSizedForEveryBroker(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(12, testTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	h := harnessOn(t, c)
	b, err := memory.New(256<<20, 10)
	if err != nil {
		t.Fatal(err)
	}
	var known int
	hd := handlerFunc(func(_ context.Context, _ *handler.Message, ack handler.Ack) { ack.Done(nil) })
	r := h.newReceiver("g-first-fit", hd, 256, func(o *Options) {
		o.ClientOpts = append(o.ClientOpts, kgo.FetchMaxBytes(16<<20), kgo.FetchMaxPartitionBytes(1<<20))
		o.Fetch = b.Join()
		o.afterClient = func(cl *kgo.Client) { known = len(cl.DiscoveredBrokers()) }
	})
	defer stop(t, r)
	// Half the part (the other half for what the receiver holds), at the
	// assumed compression, among three brokers.
	want := int32(b.FetchBytes() / 2 / memory.InitialRatio / 3)
	if r.fetchMax > want*9/8 {
		t.Errorf("first fetch limit %d with %d brokers known; want at most %d, sized for 3", r.fetchMax, known, want)
	}
}
