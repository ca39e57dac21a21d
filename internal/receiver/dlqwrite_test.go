package receiver

// Regression tests of two defects a review of the dead-letter path found
// in the write's promise; each failed before its fix.

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/testwait"
)

// TestADeadLetterTooLargeIsRewrittenOutsideItsPromise: a dead letter too
// large for its topic is written again as a stub. That write was made from
// inside the client's promise of the first, where the failed record still
// counts in the client's buffer: with the buffer at its limit, Produce
// waited for room the waiting promise held, and every dead-letter write of
// the receiver stopped until the partition closed. Here the buffer holds
// one record.
func TestADeadLetterTooLargeIsRewrittenOutsideItsPromise(t *testing.T) {
	const group = "g-dlq-stub-full"
	h := newHarness(t, 1)
	if err := h.c.CreateTopic(testTopic+".dlq", 1, map[string]string{"max.message.bytes": "2000"}); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 5000) // incompressible: too large for the dead-letter topic however it is sent
	for i := range big {
		big[i] = byte(rand.Uint32())
	}
	cl, err := kgo.NewClient(brokers(h.c)...)
	if err != nil {
		t.Fatal(err)
	}
	err = cl.ProduceSync(context.Background(),
		&kgo.Record{Topic: testTopic, Key: []byte("agg"), Value: big},
		&kgo.Record{Topic: testTopic, Key: []byte("agg"), Value: []byte("small")},
	).FirstErr()
	cl.Close()
	if err != nil {
		t.Fatal(err)
	}
	hd := handler.Sync(func(context.Context, *handler.Message) error {
		return handler.Classed(handler.Permanent, errors.New("rejected"))
	})
	r := h.receiver(group, hd, 16, func(o *Options) {
		o.ClientOpts = append(o.ClientOpts, kgo.MaxBufferedRecords(1))
	})
	defer stop(t, r)
	testwait.For(t, 20*time.Second, "both records dead-lettered and committed", func() bool { return h.committedAtEnd(group) })
}

// TestADeadLetterEndedByAnotherPartitionsWriteIsNotAnAttempt: the client
// fails the records buffered for a partition of the dead-letter topic with
// the context of the first of them. Two source partitions share a
// dead-letter partition whose leader is moving; the first source
// partition is lost, and its dead letter's context ends the other's write.
// That was counted as one of the 8 refusals a dead letter is allowed
// (enough of them would commit past a record never written); it is
// written again without counting, and lands once the leader is back.
func TestADeadLetterEndedByAnotherPartitionsWriteIsNotAnAttempt(t *testing.T) {
	const group, dlq = "g-dlq-shared-cancel", "shared.dlq"
	h := newHarness(t, 2)
	if err := h.c.CreateTopic(dlq, 1, nil); err != nil {
		t.Fatal(err)
	}
	fault := h.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Topic: dlq, Err: kerr.LeaderNotAvailable, Count: -1})
	produceAt(t, h.c, testTopic, 0, "a")
	produceAt(t, h.c, testTopic, 1, "b")
	hd := handler.Sync(func(_ context.Context, m *handler.Message) error {
		if m.Partition == 1 {
			time.Sleep(500 * time.Millisecond) // its dead letter queues behind partition 0's
		}
		return handler.Classed(handler.Permanent, errors.New("rejected"))
	})
	core, logs := observer.New(zap.InfoLevel)
	r := h.receiver(group, hd, 16, func(o *Options) {
		o.DeadLetter.Topic = func(string) string { return dlq }
		o.Logger = zap.New(core)
	})
	defer stop(t, r)
	time.Sleep(2 * time.Second) // both dead letters buffered
	r.onLost(context.Background(), r.cl, map[string][]int32{testTopic: {0}})
	r.rebalancing.Store(false) // as the assignment that follows a loss does
	testwait.For(t, 10*time.Second, "partition 1's dead letter written again", func() bool {
		for _, e := range logs.FilterMessageSnippet("ended by another partition's write").All() {
			if e.ContextMap()["partition"] == int32(1) {
				return true
			}
		}
		return false
	})
	fault.Remove()
	testwait.For(t, 20*time.Second, "partition 1 committed past its dead letter", func() bool {
		c, _ := h.offsets(group)
		return c[1] == 1
	})
	for _, e := range logs.FilterMessageSnippet("dead-letter write failed").All() {
		if err, _ := e.ContextMap()["error"].(string); strings.Contains(err, "context canceled") {
			t.Errorf("another partition's cancellation counted as a refused write: %v", e.ContextMap())
		}
	}
}
