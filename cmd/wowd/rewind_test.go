package main_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRewindCommand runs wowd rewind against a kfake broker: its usage
// errors exit 2 naming what is valid, a plan commits nothing, --execute
// commits it, and a running consumer in the group makes it exit 1 naming
// the member.
func TestRewindCommand(t *testing.T) {
	const topic, group = "wow.example.cart.event", "carts.projection.example"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for i := range 5 {
		r := &kgo.Record{Topic: topic, Key: []byte("k"), Value: []byte("v"), Timestamp: t0.Add(time.Duration(i) * time.Minute)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	adm := kadm.NewClient(cl)
	if err := adm.CommitAllOffsets(ctx, group, kadm.Offsets{topic: {0: {Topic: topic, Partition: 0, At: 5, LeaderEpoch: -1}}}); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "wowd.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `wow:
  service: carts
  kafka:
    bootstrap-servers: [%s]
  contexts:
    example-service:
      alias: example
      aggregates: [cart]
  dispatchers:
    projection:
      topics: [event]
      handler: {type: discard}
    other:
      topics: [event]
      handler: {type: discard}
`, c.ListenAddrs()[0]), 0o600); err != nil {
		t.Fatal(err)
	}
	offset := func() int64 {
		resp, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			t.Fatal(err)
		}
		o, _ := resp.Lookup(topic, 0)
		return o.At
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dispatcher", "nope", "--to", "earliest"}, `--dispatcher "nope": no such dispatcher in the configuration (dispatchers: other, projection)`},
		{[]string{"--dispatcher", "projection", "--context", "x", "--to", "earliest"}, `--context "x": dispatcher projection consumes no such context (its contexts: example-service)`},
		{[]string{"--dispatcher", "projection", "--to", "10:00"}, `--to: "10:00": want earliest, latest or an RFC 3339 time`},
		{[]string{"--to", "earliest"}, "--dispatcher is required"},
		{[]string{"--dispatcher", "projection", "--tox", "earliest"}, "unknown flag: --tox"},
	} {
		out, code := runWowd(t, append([]string{"rewind", "--config", cfg}, tc.args...)...)
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("wowd rewind %s: exit %d, want 2 and %q:\n%s", strings.Join(tc.args, " "), code, tc.want, out)
		}
	}

	out, code := runWowd(t, "rewind", "--config", cfg, "--dispatcher", "projection", "--to", "2026-12-01T10:02:00Z")
	if code != 0 || !strings.Contains(out, group+"  "+topic+"  0          5          2    3") || !strings.Contains(out, "nothing committed") {
		t.Fatalf("plan: exit %d:\n%s", code, out)
	}
	if got := offset(); got != 5 {
		t.Fatalf("committed %d after a plan, want 5 still", got)
	}
	out, code = runWowd(t, "rewind", "--config", cfg, "--dispatcher", "projection", "--to", "2026-12-01T10:02:00Z", "--execute")
	if code != 0 || !strings.Contains(out, "committed 1 offsets") {
		t.Fatalf("execute: exit %d:\n%s", code, out)
	}
	if got := offset(); got != 2 {
		t.Fatalf("committed %d after --execute, want 2", got)
	}

	consumer, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ClientID("wowd-projection"),
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	for len(consumer.PollFetches(ctx).Records()) == 0 && ctx.Err() == nil { // joined: it fetches from 2
	}
	out, code = runWowd(t, "rewind", "--config", cfg, "--dispatcher", "projection", "--to", "earliest", "--execute")
	if code != 1 || !strings.Contains(out, "stop it first") || !strings.Contains(out, "(wowd-projection on ") {
		t.Fatalf("with a member: exit %d, want 1 naming it:\n%s", code, out)
	}
	if got := offset(); got != 2 {
		t.Fatalf("committed %d while refused, want 2 still", got)
	}
}
