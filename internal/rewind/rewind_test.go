package rewind

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/wowd/wowd/internal/config"
	_ "github.com/wowd/wowd/internal/handlers" // discard, for the configurations
	"github.com/wowd/wowd/internal/kfaketest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	cartTopic  = "wow.example.cart.event"
	orderTopic = "wow.example.order.event"
	group      = "carts.projection.example" // daemon.GroupID of dispatcher projection, context example-service
)

// t0 is the timestamp of the first record of every partition; record i has
// t0 + i minutes.
var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func testConfig(t *testing.T, brokers string) *config.Config {
	t.Helper()
	cfg, err := config.Parse(fmt.Appendf(nil, `
wow:
  service: carts
  kafka:
    bootstrap-servers: [%s]
  contexts:
    example-service:
      alias: example
      aggregates: [cart, order]
    billing:
      aggregates: [invoice]
  dispatchers:
    projection:
      topics: [event]
      contexts: [example-service]
      handler: {type: discard}
    audit:
      topics: [event, command]
      group-id: audit-group
      handler: {type: discard}
`, brokers), "test.yaml", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// cluster is a kfake broker whose cart topic has two partitions of 10 and 6
// records and order topic one of 4, record i of each at t0 + i minutes.
func cluster(t *testing.T) (*kfake.Cluster, *kadm.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, cartTopic), kfake.SeedTopics(1, orderTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	var recs []*kgo.Record
	for _, tp := range []struct {
		topic     string
		partition int32
		n         int
	}{{cartTopic, 0, 10}, {cartTopic, 1, 6}, {orderTopic, 0, 4}} {
		for i := range tp.n {
			recs = append(recs, &kgo.Record{Topic: tp.topic, Partition: tp.partition, Key: []byte("k"),
				Value: []byte("v"), Timestamp: t0.Add(time.Duration(i) * time.Minute)})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return c, kadm.NewClient(cl)
}

func commit(t *testing.T, adm *kadm.Client, group string, offsets map[string]map[int32]int64) {
	t.Helper()
	var os kadm.Offsets
	for topic, ps := range offsets {
		for p, at := range ps {
			os.Add(kadm.Offset{Topic: topic, Partition: p, At: at, LeaderEpoch: -1})
		}
	}
	if err := adm.CommitAllOffsets(context.Background(), group, os); err != nil {
		t.Fatal(err)
	}
}

func committed(t *testing.T, adm *kadm.Client, group string) map[string]int64 {
	t.Helper()
	resp, err := adm.FetchOffsets(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	resp.Each(func(o kadm.OffsetResponse) { out[fmt.Sprintf("%s[%d]", o.Topic, o.Partition)] = o.At })
	return out
}

func rows(p *Plan) []string {
	var out []string
	for _, r := range p.Rows {
		n, ok := r.Replay()
		replay := "-"
		if ok {
			replay = fmt.Sprint(n)
		}
		out = append(out, fmt.Sprintf("%s %s[%d] %d->%d replay %s", r.Group, r.Topic, r.Partition, r.Committed, r.New, replay))
	}
	return out
}

func TestReceivers(t *testing.T) {
	cfg := testConfig(t, "127.0.0.1:1")
	got, err := Receivers(cfg, "audit", "")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprint([]Receiver{
		{Context: "billing", Group: "audit-group.billing", Topics: []string{"wow.billing.invoice.command", "wow.billing.invoice.event"}},
		{Context: "example-service", Group: "audit-group.example", Topics: []string{
			"wow.example.cart.command", "wow.example.cart.event", "wow.example.order.command", "wow.example.order.event"}},
	})
	if fmt.Sprint(got) != want {
		t.Errorf("receivers of audit:\n got %v\nwant %v", got, want)
	}
	if got, err := Receivers(cfg, "audit", "billing"); err != nil || len(got) != 1 || got[0].Context != "billing" {
		t.Errorf("--context billing: %v, %v", got, err)
	}
	var ue *UsageError
	if _, err := Receivers(cfg, "nope", ""); !errors.As(err, &ue) || !strings.Contains(err.Error(), "(dispatchers: audit, projection)") {
		t.Errorf("unknown dispatcher: %v", err)
	}
	if _, err := Receivers(cfg, "projection", "billing"); !errors.As(err, &ue) || !strings.Contains(err.Error(), "(its contexts: example-service)") {
		t.Errorf("context the dispatcher does not consume: %v", err)
	}
}

func TestParseTarget(t *testing.T) {
	for in, want := range map[string]string{
		"earliest": "earliest", "LATEST": "latest", "2026-12-01T10:03:00Z": "2026-12-01T10:03:00Z",
		"2026-12-01T11:03:00.5+01:00": "2026-12-01T10:03:00.5Z",
	} {
		if got, err := ParseTarget(in); err != nil || got.String() != want {
			t.Errorf("%q: %v, %v; want %s", in, got, err, want)
		}
	}
	// Before the epoch: -1 ms would be the broker's "latest", skipping
	// every record.
	for _, in := range []string{"", "yesterday", "2026-12-01", "2026-12-01 10:00:00",
		"1969-12-31T23:59:59.999Z", "0001-01-01T00:00:00Z"} {
		if _, err := ParseTarget(in); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

// TestPlanAndExecute rewinds to a time in the middle of the records, then
// to the start and the end, and checks each plan's numbers and the offsets
// committed.
func TestPlanAndExecute(t *testing.T) {
	c, adm := cluster(t)
	cfg := testConfig(t, c.ListenAddrs()[0])
	commit(t, adm, group, map[string]map[int32]int64{cartTopic: {0: 8, 1: 5}}) // order: nothing committed
	receivers, err := Receivers(cfg, "projection", "")
	if err != nil {
		t.Fatal(err)
	}
	groups := Describer(adm, "classic")
	ctx := context.Background()

	for _, tc := range []struct {
		to     string
		want   []string
		commit map[string]int64
	}{
		{"2026-12-01T10:03:00Z", []string{
			group + " " + cartTopic + "[0] 8->3 replay 5",
			group + " " + cartTopic + "[1] 5->3 replay 2",
			group + " " + orderTopic + "[0] -1->3 replay -",
		}, map[string]int64{cartTopic + "[0]": 3, cartTopic + "[1]": 3, orderTopic + "[0]": 3}},
		{"2026-12-01T10:07:30Z", []string{ // after every record of partition 1 and order: their end
			group + " " + cartTopic + "[0] 3->8 replay -5",
			group + " " + cartTopic + "[1] 3->6 replay -3",
			group + " " + orderTopic + "[0] 3->4 replay -1",
		}, map[string]int64{cartTopic + "[0]": 8, cartTopic + "[1]": 6, orderTopic + "[0]": 4}},
		{"earliest", []string{
			group + " " + cartTopic + "[0] 8->0 replay 8",
			group + " " + cartTopic + "[1] 6->0 replay 6",
			group + " " + orderTopic + "[0] 4->0 replay 4",
		}, map[string]int64{cartTopic + "[0]": 0, cartTopic + "[1]": 0, orderTopic + "[0]": 0}},
		{"latest", []string{
			group + " " + cartTopic + "[0] 0->10 replay -10",
			group + " " + cartTopic + "[1] 0->6 replay -6",
			group + " " + orderTopic + "[0] 0->4 replay -4",
		}, map[string]int64{cartTopic + "[0]": 10, cartTopic + "[1]": 6, orderTopic + "[0]": 4}},
	} {
		target, err := ParseTarget(tc.to)
		if err != nil {
			t.Fatal(err)
		}
		before := committed(t, adm, group)
		plan, err := MakePlan(ctx, adm, groups, receivers, target)
		if err != nil {
			t.Fatalf("%s: %v", tc.to, err)
		}
		if got := rows(plan); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Fatalf("plan to %s:\n got %q\nwant %q", tc.to, got, tc.want)
		}
		if after := committed(t, adm, group); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("planning committed: %v, was %v", after, before)
		}
		n, err := Execute(ctx, adm, groups, receivers, plan)
		if err != nil || n != 3 {
			t.Fatalf("execute to %s: %d, %v", tc.to, n, err)
		}
		if got := committed(t, adm, group); fmt.Sprint(got) != fmt.Sprint(tc.commit) {
			t.Fatalf("committed after the rewind to %s: %v, want %v", tc.to, got, tc.commit)
		}
	}
}

func TestWrite(t *testing.T) {
	plan := &Plan{Target: Target{Earliest: true}, Missing: []string{"wow.x.y.event"}, Rows: []Row{
		{Group: "g", Topic: "t", Partition: 0, Committed: 8, New: 3},
		{Group: "g", Topic: "t", Partition: 1, Committed: -1, New: 0},
		{Group: "g", Topic: "t", Partition: 2, Committed: 2, New: 5},
	}}
	var b bytes.Buffer
	if err := Write(&b, plan); err != nil {
		t.Fatal(err)
	}
	want := `GROUP  TOPIC  PARTITION  COMMITTED  NEW  REPLAY
g      t      0          8          3    5
g      t      1          -          0    -
g      t      2          2          5    -3
to earliest: 3 partitions, 5 records to replay, 3 to skip
skipping ahead on 1 partition: the records between the committed offset and the new one are never handled: g t[2] 2->5
topic wow.x.y.event does not exist: nothing to rewind there
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}

	// Without a partition skipping ahead, no such line; with many, five
	// are named.
	b.Reset()
	if err := Write(&b, &Plan{Target: Target{Latest: true}}); err != nil {
		t.Fatal(err)
	}
	if want := "GROUP  TOPIC  PARTITION  COMMITTED  NEW  REPLAY\nto latest: 0 partitions, 0 records to replay, 0 to skip\n"; b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	many := &Plan{Target: Target{Latest: true}}
	for p := range int32(7) {
		many.Rows = append(many.Rows, Row{Group: "g", Topic: "t", Partition: p, Committed: 1, New: 4})
	}
	b.Reset()
	if err := Write(&b, many); err != nil {
		t.Fatal(err)
	}
	if want := "skipping ahead on 7 partitions: the records between the committed offset and the new one are never handled: g t[0] 1->4 g t[1] 1->4 g t[2] 1->4 g t[3] 1->4 g t[4] 1->4 and 2 more\n"; !strings.HasSuffix(b.String(), want) ||
		!strings.Contains(b.String(), "7 partitions, 0 records to replay, 21 to skip") {
		t.Errorf("got\n%s\nwant the totals and a last line\n%s", b.String(), want)
	}
}

// TestRefusedWhileMembers: with a consumer in the group, neither a plan
// nor a commit is made, and the error names the member.
func TestRefusedWhileMembers(t *testing.T) {
	c, adm := cluster(t)
	cfg := testConfig(t, c.ListenAddrs()[0])
	commit(t, adm, group, map[string]map[int32]int64{cartTopic: {0: 8, 1: 5}})
	before := committed(t, adm, group)
	receivers, err := Receivers(cfg, "projection", "example-service")
	if err != nil {
		t.Fatal(err)
	}
	groups := Describer(adm, "classic")
	target, _ := ParseTarget("earliest")
	plan, err := MakePlan(context.Background(), adm, groups, receivers, target)
	if err != nil {
		t.Fatal(err)
	}

	consumer, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ClientID("running-wowd"),
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(cartTopic), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for { // joined once it is assigned partitions
		consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal("the consumer did not join the group in 10s")
		}
		members, err := groups.Members(ctx, []string{group})
		if err == nil && len(members[group]) > 0 {
			break
		}
	}

	var ae *ActiveError
	if _, err := MakePlan(ctx, adm, groups, receivers, target); !errors.As(err, &ae) ||
		!strings.Contains(err.Error(), "group "+group+": ") || !strings.Contains(err.Error(), "(running-wowd on 127.0.0.1") {
		t.Errorf("plan with a member: %v", err)
	}
	if _, err := Execute(ctx, adm, groups, receivers, plan); !errors.As(err, &ae) {
		t.Errorf("execute with a member: %v", err)
	}
	if after := committed(t, adm, group); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("committed while refused: %v, was %v", after, before)
	}
}

// TestMissingTopics: the topics of a receiver that do not exist are named,
// not an error, and nothing is committed for them.
func TestMissingTopics(t *testing.T) {
	c, adm := cluster(t)
	cfg := testConfig(t, c.ListenAddrs()[0])
	receivers, err := Receivers(cfg, "audit", "billing")
	if err != nil {
		t.Fatal(err)
	}
	groups := Describer(adm, "classic")
	plan, err := MakePlan(context.Background(), adm, groups, receivers, Target{Latest: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Rows) != 0 || fmt.Sprint(plan.Missing) != "[wow.billing.invoice.command wow.billing.invoice.event]" {
		t.Fatalf("plan %+v", plan)
	}
	if n, err := Execute(context.Background(), adm, groups, receivers, plan); n != 0 || err != nil {
		t.Fatalf("execute: %d, %v", n, err)
	}
}

// TestTopicErrorsAreNotMissingTopics: a topic whose offsets cannot be listed
// for a reason other than its absence (its leader moving) fails the plan; it
// was reported as a missing topic, left out, and a rewind of the others
// exited 0 as if done.
func TestTopicErrorsAreNotMissingTopics(t *testing.T) {
	c, _ := cluster(t)
	cfg := testConfig(t, c.ListenAddrs()[0])
	receivers, err := Receivers(cfg, "projection", "")
	if err != nil {
		t.Fatal(err)
	}
	kfaketest.Leaderless(c, cartTopic, nil)
	// A new client: the first one has the topics' metadata cached.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	fresh := kadm.NewClient(cl)
	_, err = MakePlan(context.Background(), fresh, Describer(fresh, "classic"), receivers, Target{Latest: true})
	if !errors.Is(err, kerr.LeaderNotAvailable) || !strings.Contains(err.Error(), cartTopic) {
		t.Fatalf("plan with %s's leader not available: %v, want the error naming the topic", cartTopic, err)
	}
}
