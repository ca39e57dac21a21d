package rewind

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestPlanToASubMillisecondTimeStartsAtTheNextMillisecond (found by review): --to takes an RFC 3339 time with
// fractions of a millisecond (ParseTarget keeps them, the plan prints them),
// and the plan goes to "the first record at or after it, by the record
// timestamp" (docs/operations.md). Record timestamps are milliseconds: a
// record at 10:03:00.000 is before 10:03:00.0005, so the first record at or
// after it is the one at 10:04. MakePlan truncates the time to its
// millisecond (target.At.UnixMilli()) and goes to the record at 10:03:
// one record before the time asked is replayed.
func TestPlanToASubMillisecondTimeStartsAtTheNextMillisecond(t *testing.T) {
	c, adm := cluster(t) // record i of each partition at t0 + i minutes
	cfg := testConfig(t, c.ListenAddrs()[0])
	receivers, err := Receivers(cfg, "projection", "")
	if err != nil {
		t.Fatal(err)
	}
	target, err := ParseTarget("2026-12-01T10:03:00.0005Z")
	if err != nil {
		t.Fatal(err)
	}
	if target.String() != "2026-12-01T10:03:00.0005Z" {
		t.Fatalf("target %s", target)
	}
	plan, err := MakePlan(context.Background(), adm, Describer(adm, "classic"), receivers, target)
	if err != nil {
		t.Fatal(err)
	}
	// cart[0] has 10 records, cart[1] 6, order[0] 4 (offsets 0..n-1 at
	// t0 + offset minutes): the first at or after 10:03:00.0005 is offset 4
	// (10:04), and order[0] has none, so its end, 4.
	want := fmt.Sprint([]string{
		group + " " + cartTopic + "[0] -1->4 replay -",
		group + " " + cartTopic + "[1] -1->4 replay -",
		group + " " + orderTopic + "[0] -1->4 replay -",
	})
	if got := fmt.Sprint(rows(plan)); got != want {
		t.Errorf("plan to %s (record timestamps: %s + offset minutes):\n got %s\nwant %s",
			target, t0.Format(time.RFC3339), got, want)
	}
}

// TestPlanIsRefusedWhenALastStableOffsetCannotBeListed (found by review): for a time, the plan holds
// each partition's offset to its last stable offset (belowOpen), so that a
// rewind past every record does not commit the log's end beyond a
// transaction still open, whose records the group would then never read.
// When the listing of the last stable offsets answers with an error for a
// partition, belowOpen keeps the offset read uncommitted (so.Err != nil is
// skipped) and the plan commits the log's end past the open transaction,
// where every other listing error fails the plan ("a rewind that left it
// out would be reported done while it was not").
func TestPlanIsRefusedWhenALastStableOffsetCannotBeListed(t *testing.T) {
	c, adm := cluster(t) // cart[0] holds 10 records, the last at t0 + 9m
	cfg := testConfig(t, c.ListenAddrs()[0])
	receivers, err := Receivers(cfg, "projection", "example-service")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	txn, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("cart-writer"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"t1", "t2"} { // offsets 10 and 11, uncommitted
		if err := txn.ProduceSync(ctx, &kgo.Record{Topic: cartTopic, Partition: 0, Key: []byte("k"), Value: []byte(v),
			Timestamp: t0.Add(20 * time.Minute)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	defer txn.EndTransaction(context.Background(), kgo.TryAbort)

	// The read-committed listing (the last stable offsets) fails for
	// cart[0]; the others answer as the broker would.
	c.ControlKey(int16(kmsg.ListOffsets), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.ListOffsetsRequest)
		if req.IsolationLevel != 1 {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.UnknownServerError.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})

	target, err := ParseTarget("2026-12-01T11:00:00Z") // after every record
	if err != nil {
		t.Fatal(err)
	}
	plan, err := MakePlan(ctx, adm, Describer(adm, "classic"), receivers, target)
	if err != nil {
		return // refused: the rewind does not commit what it could not check
	}
	for _, r := range plan.Rows {
		if r.Topic == cartTopic && r.Partition == 0 && r.New > 10 {
			t.Fatalf("the last stable offsets could not be listed, yet the plan was made, moving %s[0] to %d, past the open transaction's records at 10 and 11 (plan %q)",
				cartTopic, r.New, rows(plan))
		}
	}
}
