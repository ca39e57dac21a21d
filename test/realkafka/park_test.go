package realkafka

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestParkedAggregatesAcrossKill9: with on-failure park, a sink that rejects
// one message of three aggregates for good. Their later messages are not
// delivered, every other aggregate's are, and the group's commit reaches the
// end of every partition. wowd is killed with SIGKILL and restarted, more
// messages come: the three are still parked (wowd parked list says so) and
// still not delivered. Then, with the sink fixed for the first:
// redrive delivers its parked messages in order, then its new ones; skip
// dead-letters the second's head and delivers the rest; discard
// dead-letters all of the third's parked messages, and its next message is
// delivered. The sink checks per-aggregate order throughout.
func TestParkedAggregatesAcrossKill9(t *testing.T) {
	parkedAcrossKill9(t, "classic")
}

// TestParkedAggregatesAcrossKill9KIP848 is TestParkedAggregatesAcrossKill9
// with the consumer group protocol (KIP-848), whose members' parking lease
// is confirmed by a ConsumerGroupDescribe (the member's epoch at the
// target assignment's) where the classic protocol's is by DescribeGroups.
func TestParkedAggregatesAcrossKill9KIP848(t *testing.T) {
	parkedAcrossKill9(t, "consumer")
}

func parkedAcrossKill9(t *testing.T, protocol string) {
	e := newEnv(t, "park"+protocol[:2])
	topic := e.topic("shop", "cart")
	e.createTopic(topic, 4)
	for _, tp := range []string{topic + ".parked", topic + ".dlq", "wowd-parked." + e.id + ".sink"} {
		e.deleteAtEnd(tp)
	}
	s := newSink(t)
	redrive, skip, discard := "agg-7", "agg-11", "agg-13"
	fixed := make(chan struct{})
	reject := func(d *delivery) bool {
		switch d.key {
		case redrive:
			select {
			case <-fixed:
				return false
			default:
				return d.seq == 3
			}
		case skip:
			return d.seq == 2
		case discard:
			return d.seq == 1
		}
		return false
	}
	s.reject.Store(&reject)
	cfg := e.config("shop", []string{"cart"}, s.URL())
	cfg.OnFailure = "park"
	cfg.GroupProtocol = protocol
	c := newCluster(e, cfg)
	p := c.start()
	group := e.group("shop")

	seqs := make(map[string]int64)
	prod := e.producer()
	first := e.keyed(topic, 2000, 20, seqs, 0)
	e.produce(prod, first)
	ends := e.endOffsets(topic)
	e.waitCommittedAtEnd(group, ends, 3*time.Minute)
	checkGroupType(t, e, group, protocol)
	for key, last := range map[string]int64{redrive: 2, skip: 1, discard: 0} {
		if got := s.lastSeq(topic, key); got != last {
			t.Fatalf("%s: last seq delivered %d, want %d: parked at the rejected one", key, got, last)
		}
	}
	cfgPath := c.writeConfig("cli", "127.0.0.1:0")
	parked := func() string {
		t.Helper()
		code, out := runWowd(t, processEnv(nil), "parked", "list", "--config", cfgPath, "--dispatcher", "sink")
		if code != 0 {
			t.Fatalf("wowd parked list: exit %d:\n%s", code, out)
		}
		return out
	}
	if out := parked(); !strings.Contains(out, " "+redrive+" ") || !strings.Contains(out, " "+skip+" ") || !strings.Contains(out, " "+discard+" ") {
		t.Fatalf("wowd parked list does not name the three:\n%s", out)
	}

	// kill -9, restart, more messages: still parked.
	c.kill(p)
	p = c.start()
	c.waitReady(p, 2*time.Minute)
	e.produce(prod, e.keyed(topic, 500, 20, seqs, 0))
	ends = e.endOffsets(topic)
	e.waitCommittedAtEnd(group, ends, 3*time.Minute)
	if got := s.lastSeq(topic, redrive); got != 2 {
		t.Fatalf("%s delivered up to seq %d after the restart, want 2: still parked", redrive, got)
	}
	if out := parked(); !strings.Contains(out, " "+redrive+" ") {
		t.Fatalf("after kill -9 and restart, wowd parked list does not name %s:\n%s", redrive, out)
	}

	close(fixed)
	for key, action := range map[string]string{redrive: "redrive", skip: "skip", discard: "discard"} {
		code, out := runWowd(t, processEnv(nil), "parked", action, "--config", cfgPath, "--dispatcher", "sink", "--aggregate", key)
		if code != 0 {
			t.Fatalf("wowd parked %s %s: exit %d:\n%s", action, key, code, out)
		}
	}
	code, out := runWowd(t, processEnv(nil), "parked", "redrive", "--config", cfgPath, "--dispatcher", "sink", "--aggregate", "agg-1")
	if code != 1 || !strings.Contains(out, `aggregate "agg-1" is not parked by dispatcher sink`) {
		t.Fatalf("redrive of an aggregate not parked: exit %d, want 1:\n%s", code, out)
	}
	code, out = runWowd(t, processEnv(nil), "parked", "list", "--config", cfgPath, "--dispatcher", "nope")
	if code != 2 || !strings.Contains(out, `unknown dispatcher "nope" (configured: sink)`) {
		t.Fatalf("unknown dispatcher: exit %d, want 2:\n%s", code, out)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for s.lastSeq(topic, redrive) != seqs[redrive]-1 || s.lastSeq(topic, skip) != seqs[skip]-1 {
		if time.Now().After(deadline) {
			t.Fatalf("after the actions: %s delivered up to seq %d of %d, %s up to %d of %d", redrive, s.lastSeq(topic, redrive), seqs[redrive]-1,
				skip, s.lastSeq(topic, skip), seqs[skip]-1)
		}
		c.checkAlive()
		time.Sleep(100 * time.Millisecond)
	}
	for strings.Contains(parked(), "agg-") {
		if time.Now().After(deadline) {
			t.Fatalf("still parked after the actions:\n%s", parked())
		}
		time.Sleep(250 * time.Millisecond)
	}
	// The discarded aggregate is unparked: its next message is delivered.
	e.produce(prod, []*kgo.Record{{Topic: topic, Key: []byte(discard), Value: wowEvent("shop", "cart", discard, seqs[discard], "")}})
	for s.lastSeq(topic, discard) != seqs[discard] {
		if time.Now().After(deadline) {
			t.Fatalf("%s: its next message was not delivered after discard (last seq %d)", discard, s.lastSeq(topic, discard))
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.checkOrder(t)
	dead := readDeadLetterSeqs(t, e, topic+".dlq")
	want := []string{fmt.Sprintf("%s#2", skip)}
	for i := int64(1); i < seqs[discard]; i++ {
		want = append(want, fmt.Sprintf("%s#%d", discard, i))
	}
	sort.Strings(want)
	if strings.Join(dead, ",") != strings.Join(want, ",") {
		t.Fatalf("dead letters %v, want %v", dead, want)
	}
	c.stopAll()
}

// readDeadLetterSeqs reads a dead-letter topic to its end and returns its
// records as key#seq, sorted.
func readDeadLetterSeqs(t *testing.T, e *env, dlq string) []string {
	t.Helper()
	ends := e.endOffsets(dlq)
	want := sum(ends)
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds...), kgo.ConsumeTopics(dlq),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		t.Fatalf("consumer of %s: %v", dlq, err)
	}
	defer cl.Close()
	var out []string
	for int64(len(out)) < want {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("dead-letter topic %s: read %d of its %d records in a minute: %v", dlq, len(out), want, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			var v struct{ Seq int64 }
			if err := json.Unmarshal(r.Value, &v); err != nil {
				t.Fatalf("dead letter %q: %v", r.Value, err)
			}
			out = append(out, fmt.Sprintf("%s#%d", r.Key, v.Seq))
		})
	}
	sort.Strings(out)
	return out
}
