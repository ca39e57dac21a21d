package receiver

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/executor"
	"github.com/wowd/wowd/internal/testwait"
)

// produceTxn writes values to partition 0 of topic in one transaction of
// a transactional producer, committed or aborted.
func produceTxn(t *testing.T, cl *kgo.Client, commit bool, values ...string) {
	t.Helper()
	ctx := context.Background()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, v := range values {
		rec := &kgo.Record{Topic: testTopic, Partition: 0, Key: []byte("agg-" + v[:1]), Value: []byte(v)}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatal(err)
	}
}

// TestTransactionalTopics: of a topic written by a transactional producer,
// only committed records are handled (an aborted transaction's never), and
// the commit reaches the partition's end: past the transaction markers,
// which the broker counts as offsets and delivers to no handler. Before,
// an aborted transaction's records were handled as any other, and the
// group's lag stayed at 1 for good after the last transaction, in wowd
// status (a stuck partition, exit 1) and in any lag monitor.
func TestTransactionalTopics(t *testing.T) {
	ex := executor.New(executor.Options{Workers: 2})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = ex.Close(ctx)
	})
	h := &harness{t: t, c: newCluster(t, 1, testTopic), ex: ex}
	cl, err := kgo.NewClient(append(brokers(h.c), kgo.TransactionalID("wow-producer"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produceTxn(t, cl, true, "a1", "a2")  // offsets 0, 1; marker 2
	produceTxn(t, cl, false, "b1", "a9") // 3, 4 aborted; marker 5
	produceTxn(t, cl, true, "a3")        // 6; marker 7

	var mu sync.Mutex
	var got []string
	hd := handler.Sync(func(_ context.Context, m *handler.Message) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, string(m.Value))
		return nil
	})
	r := h.receiver("g-txn", hd, 16)
	testwait.For(t, 20*time.Second, "every partition committed to its end", func() bool { return h.committedAtEnd("g-txn") })
	stop(t, r)
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"a1", "a2", "a3"}; !slices.Equal(got, want) {
		t.Errorf("handled %q, want %q (the committed transactions' records, in order)", got, want)
	}
}
