package rewind

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRewindLeavesAnOpenTransaction: wowd reads committed records, so
// the end a rewind to latest (or to a time after every record) moves its
// groups to is the end of what is committed (the last stable offset), not
// the log's end: the records of a transaction still open are not there
// yet for it, and once the transaction commits they are delivered, as to a
// group that started at latest (kgo lists the end read committed too).
// Before, the rewind committed the log's end, past the open transaction's
// records, which the dispatcher then never handled once the transaction
// committed.
func TestRewindLeavesAnOpenTransaction(t *testing.T) {
	for _, to := range []string{"latest", "2026-12-01T11:00:00Z"} {
		t.Run(to, func(t *testing.T) { rewindPastOpenTransaction(t, to) })
	}
}

func rewindPastOpenTransaction(t *testing.T, to string) {
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

	target, err := ParseTarget(to)
	if err != nil {
		t.Fatal(err)
	}
	groups := Describer(adm, "classic")
	plan, err := MakePlan(ctx, adm, groups, receivers, target)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Execute(ctx, adm, groups, receivers, plan); err != nil {
		t.Fatal(err)
	}
	if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}

	// The dispatcher starts again: its group resumes, reading committed.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(cartTopic), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []string
	for len(got) < 2 && ctx.Err() == nil {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		fs := cl.PollFetches(pctx)
		pcancel()
		fs.EachRecord(func(r *kgo.Record) {
			if r.Partition == 0 {
				got = append(got, fmt.Sprintf("%d:%s", r.Offset, r.Value))
			}
		})
		if pctx.Err() != nil && len(got) == 0 {
			break
		}
	}
	if want := "[10:t1 11:t2]"; fmt.Sprint(got) != want {
		t.Errorf("after the rewind to %s, then the commit of the transaction open during it, the group read %v of %s[0], want %s (plan: %q)",
			to, got, cartTopic, want, rows(plan))
	}
}
