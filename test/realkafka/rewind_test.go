package realkafka

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/internal/proctest"
)

// TestRewind runs wowd rewind against the real broker: the plan to a time
// in the middle of records with known timestamps has exact numbers and
// commits nothing; --execute commits it; while a wowd process runs the
// dispatcher, rewind exits 1 naming it; once the process stopped, the group
// is empty and a rewind to the start goes through.
func TestRewind(t *testing.T) {
	e := newEnv(t, "rw")
	topic, group := e.topic("shop", "cart"), e.group("shop")
	e.createTopic(topic, 2)
	t0 := time.Now().Add(-2 * time.Hour).Truncate(time.Minute) // within what the broker accepts
	var recs []*kgo.Record
	for p := range int32(2) {
		for i := range 10 {
			id := fmt.Sprintf("cart-%d", p)
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Key: []byte(id),
				Value: wowEvent("shop", "cart", id, int64(i+1), ""), Timestamp: t0.Add(time.Duration(i) * time.Minute)})
		}
	}
	e.produce(e.producer(kgo.RecordPartitioner(kgo.ManualPartitioner())), recs)
	if err := e.adm.CommitAllOffsets(e.ctx, group, kadm.Offsets{topic: {
		0: {Topic: topic, Partition: 0, At: 8, LeaderEpoch: -1},
		1: {Topic: topic, Partition: 1, At: 5, LeaderEpoch: -1},
	}}); err != nil {
		t.Fatal(err)
	}
	s := newSink(t)
	c := newCluster(e, e.config("shop", []string{"cart"}, s.URL()))
	path := c.writeConfig("rewind", fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t)))
	offsets := func() string {
		t.Helper()
		got, err := e.committed(group)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%d/%d", got[tpKey{topic, 0}], got[tpKey{topic, 1}])
	}
	rewind := func(args ...string) (int, string) {
		return runWowd(t, processEnv(nil), append([]string{"rewind", "--config", path, "--dispatcher", "sink"}, args...)...)
	}

	to := t0.Add(3 * time.Minute).UTC().Format(time.RFC3339)
	code, out := rewind("--to", to)
	t.Logf("wowd rewind --to %s:\n%s", to, out)
	for _, row := range []string{topic + "  0          8          3    5", topic + "  1          5          3    2"} {
		if code != 0 || !strings.Contains(out, group+"  "+row) {
			t.Fatalf("plan: exit %d, want 0 and the row %q", code, row)
		}
	}
	if got := offsets(); got != "8/5" {
		t.Fatalf("committed %s after a plan, want 8/5", got)
	}
	if code, out = rewind("--to", to, "--execute"); code != 0 || !strings.Contains(out, "committed 2 offsets") {
		t.Fatalf("execute: exit %d:\n%s", code, out)
	}
	if got := offsets(); got != "3/3" {
		t.Fatalf("committed %s after --execute, want 3/3", got)
	}

	p := c.start()
	c.waitReady(p, time.Minute)
	e.waitCommittedAtEnd(group, e.endOffsets(topic), time.Minute) // it replayed from 3
	code, out = rewind("--to", "earliest", "--execute")
	if code != 1 || !strings.Contains(out, "stop it first") || !strings.Contains(out, "group "+group+": ") {
		t.Fatalf("with wowd running: exit %d, want 1 naming its member:\n%s", code, out)
	}
	t.Logf("refused while running:\n%s", out)
	if got := offsets(); got != "10/10" {
		t.Fatalf("committed %s after a refused rewind, want 10/10", got)
	}
	c.stop(p) // leaves the group
	if code, out = rewind("--to", "earliest", "--execute"); code != 0 || !strings.Contains(out, "committed 2 offsets") {
		t.Fatalf("after the stop: exit %d:\n%s", code, out)
	}
	if got := offsets(); got != "0/0" {
		t.Fatalf("committed %s after the rewind to earliest, want 0/0", got)
	}
}
