package park

import (
	"context"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestStateTopicOfSeveralPartitionsIsRefused: a state topic created by hand
// with more than one partition is refused by its readers, with the reason,
// instead of read out of order (Kafka orders records only within a
// partition, and owner epochs and requests rely on that order).
func TestStateTopicOfSeveralPartitionsIsRefused(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "state-3"), kfake.SeedTopics(1, "state-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	opts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	if _, err := ReadState(ctx, opts, adm, "state-1"); err != nil {
		t.Fatalf("a state topic of one partition: %v", err)
	}
	_, err = ReadState(ctx, opts, adm, "state-3")
	if err == nil || !strings.Contains(err.Error(), "state-3 has 3 partitions: it must have exactly one") {
		t.Fatalf("reading a state topic of 3 partitions: %v", err)
	}
	tail, err := NewTail(opts, "state-3", func(string, *State) {}, func(error) {})
	if err != nil {
		t.Fatal(err)
	}
	tctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); tail.Run(tctx) }()
	err = tail.CaughtUp(ctx)
	stop()
	<-done
	if err == nil || !strings.Contains(err.Error(), "must have exactly one") {
		t.Fatalf("following a state topic of 3 partitions: %v", err)
	}
}

// parkedTopicClient starts a cluster holding topic's parked topic and
// returns the options to reach it and a client that writes to the parked
// topic in batches of up to 6 MiB; both end with the test.
func parkedTopicClient(t *testing.T, topic string) ([]kgo.Opt, *kgo.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, Topic(topic)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	opts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
	cl, err := kgo.NewClient(append(opts, kgo.ProducerBatchMaxBytes(6<<20), kgo.DefaultProduceTopic(Topic(topic)))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return opts, cl
}

// TestParkedFromBoundsItsChunkInBytes: a redrive holds the chunk it reads
// while it hands the messages over, so parked copies of several MiB come a
// few at a time (at least one), not limit at a time, and none is passed
// over between chunks.
func TestParkedFromBoundsItsChunkInBytes(t *testing.T) {
	const topic = "orders"
	opts, cl := parkedTopicClient(t, topic)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := &State{Service: "svc", Dispatcher: "d", Topic: topic, Aggregate: "A"}
	parked := func(key string, size int) *kgo.Record {
		return &kgo.Record{Key: []byte(key), Value: make([]byte, size), Headers: []kgo.RecordHeader{
			{Key: HeaderService, Value: []byte("svc")}, {Key: HeaderDispatcher, Value: []byte("d")}}}
	}
	const big = 900 << 10
	var want []int64
	for i := range 10 {
		rs := cl.ProduceSync(ctx, parked("A", big), parked("B", big)) // another aggregate's between
		if err := rs.FirstErr(); err != nil {
			t.Fatalf("producing %d: %v", i, err)
		}
		want = append(want, rs[0].Record.Offset)
	}
	adm := kadm.NewClient(cl)
	var got []int64
	var chunks []int
	from := int64(0)
	for {
		recs, next, err := ParkedFrom(ctx, opts, adm, s, from, 256)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			break
		}
		chunks = append(chunks, len(recs))
		for _, r := range recs {
			got = append(got, r.Offset)
		}
		from = next
	}
	// 4 MiB: the fifth message of 900 KiB reaches it.
	if len(chunks) != 2 || chunks[0] != 5 || chunks[1] != 5 {
		t.Errorf("chunks of %v messages, want [5 5] (4 MiB of 900 KiB messages, at most)", chunks)
	}
	if !slices.Equal(got, want) {
		t.Errorf("read offsets %v, want %v", got, want)
	}

	// One message above the bound still comes, alone.
	rs := cl.ProduceSync(ctx, parked("C", 5<<20))
	if err := rs.FirstErr(); err != nil {
		t.Fatal(err)
	}
	cs := &State{Service: "svc", Dispatcher: "d", Topic: topic, Aggregate: "C"}
	recs, _, err := ParkedFrom(ctx, opts, adm, cs, 0, 256)
	if err != nil || len(recs) != 1 {
		t.Fatalf("a message of its own: %d read, %v", len(recs), err)
	}
}

// TestParkedFromHoldsNoFetchedBatch: a chunk's messages are copies that
// share nothing with their fetched batches, so chunkBytes bounds what a
// redrive holds: 40 small messages of A, each in a batch with a 2 MiB
// message of B, held 71 MiB of the heap as they came (found by review).
func TestParkedFromHoldsNoFetchedBatch(t *testing.T) {
	const topic = "orders"
	opts, cl := parkedTopicClient(t, topic)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	parked := func(key string, size int) *kgo.Record {
		v := make([]byte, size)
		for i := range v {
			v[i] = byte(i*7 + i>>9) // not very compressible
		}
		return &kgo.Record{Key: []byte(key), Value: v, Headers: []kgo.RecordHeader{
			{Key: HeaderService, Value: []byte("svc")}, {Key: HeaderDispatcher, Value: []byte("d")}}}
	}
	const n, big = 40, 2 << 20
	for i := range n {
		if err := cl.ProduceSync(ctx, parked("A", 100), parked("B", big)).FirstErr(); err != nil {
			t.Fatalf("producing %d: %v", i, err)
		}
	}
	adm := kadm.NewClient(cl)
	s := &State{Service: "svc", Dispatcher: "d", Topic: topic, Aggregate: "A"}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	recs, _, err := ParkedFrom(ctx, opts, adm, s, 0, 256)
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	held := int64(ms.HeapAlloc) - int64(before)
	nominal := 0
	for _, r := range recs {
		nominal += recordBytes(r)
	}
	t.Logf("chunk of %d messages, %d bytes by recordBytes; heap held with the chunk: %d MiB", len(recs), nominal, held>>20)
	if held > chunkBytes {
		t.Errorf("a chunk of %d bytes (bound %d) holds %d MiB of the heap", nominal, chunkBytes, held>>20)
	}
	runtime.KeepAlive(recs)
}
