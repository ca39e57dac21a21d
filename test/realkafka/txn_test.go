package realkafka

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/internal/testwait"
)

// TestTransactionalTopic runs wowd against a topic written by a
// transactional producer on the real broker: the committed transactions'
// messages are delivered, the aborted one's never, and the group commits
// to the partition's end, past the transaction markers (lag 0 once caught
// up, as a Java consumer's).
func TestTransactionalTopic(t *testing.T) {
	e := newEnv(t, "tx")
	topic, group := e.topic("shop", "cart"), e.group("shop")
	e.createTopic(topic, 1)
	cl := e.producer(kgo.TransactionalID(e.id+"-producer"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	txn := func(commit bool, recs ...*kgo.Record) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		e.produce(cl, recs)
		if err := cl.EndTransaction(e.ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	rec := func(id string, v int64) *kgo.Record {
		return &kgo.Record{Topic: topic, Key: []byte(id), Value: wowEvent("shop", "cart", id, v, "")}
	}
	committed := []*kgo.Record{rec("cart-1", 1), rec("cart-1", 2), rec("cart-1", 3)}
	aborted := rec("cart-2", 1)
	txn(true, committed[0], committed[1])
	txn(false, aborted)
	txn(true, committed[2])
	cl.Close()
	// The coordinator writes the last marker after EndTransaction returns.
	var ends map[tpKey]int64
	testwait.For(t, 30*time.Second, "the last transaction's marker written", func() bool {
		ends = e.endOffsets(topic)
		return ends[tpKey{topic, 0}] > committed[2].Offset+1
	})

	s := newSink(t)
	c := newCluster(e, e.config("shop", []string{"cart"}, s.URL()))
	p := c.start()
	c.waitReady(p, time.Minute)
	e.waitCommittedAtEnd(group, ends, time.Minute)
	c.stop(p)
	for _, r := range committed {
		if n := s.count(topic, 0, r.Offset); n == 0 {
			t.Errorf("the committed record at offset %d was not delivered", r.Offset)
		}
	}
	if n := s.count(topic, 0, aborted.Offset); n != 0 {
		t.Errorf("the aborted record at offset %d was delivered %d times", aborted.Offset, n)
	}
	if r := s.report(); r.nViolation > 0 {
		t.Errorf("the sink saw %d violations: %v", r.nViolation, r.violations)
	}
}
