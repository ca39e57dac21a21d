package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/internal/testwait"
)

// TestCaughtUpTransactionalPartitionIsIdle: a partition written by a
// transactional producer ends with a marker that takes an offset and
// carries no message. Once wowd handled everything before it, the status
// shows the partition caught up (lag 0, idle), and `wowd status` passes;
// before, the commit stopped one short of the end, and the status
// reported the partition stuck ("no progress ... (lag 1, in flight 0)").
func TestCaughtUpTransactionalPartitionIsIdle(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, cartTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	// A transactional producer writes three events and commits, before the
	// daemon starts (so that its fetch sees the commit marker's end; a
	// fetch that raced ahead of the marker would not, which makes the
	// defect depend on timing in a live stream).
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("txn-producer"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"cart-1", "cart-2", "cart-3"} {
		rec := &kgo.Record{Topic: cartTopic, Key: []byte(id), Value: event(id+"-e", id, "")}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	sink := newSlowSink(t, "none")
	rt := startWithAdmin(t, c, sink.URL)

	testwait.For(t, 30*time.Second, "the three events handled and committed", func() bool {
		st := getStatus(t, rt.AdminAddr())
		if len(st.Receivers) == 0 || len(st.Receivers[0].Partitions) == 0 {
			return false
		}
		p := st.Receivers[0].Partitions[0]
		return p.InFlight == 0 && p.Finished >= 3 && p.Committed == p.Finished
	})
	getStatus(t, rt.AdminAddr()) // an observation
	time.Sleep(1500 * time.Millisecond)
	st := getStatus(t, rt.AdminAddr())
	p := st.Receivers[0].Partitions[0]
	t.Logf("partition: committed %d, finished %d, end %d, lag %d, in flight %d, stalled %.1fs",
		p.Committed, p.Finished, p.HighWatermark, p.Lag, p.InFlight, p.StalledSeconds)
	if probs := st.Problems(time.Second); len(probs) > 0 {
		t.Errorf("caught-up partition reported unhealthy (wowd status --stuck-after 1s exits 1): %v", probs)
	}
}
