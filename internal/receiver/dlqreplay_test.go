package receiver

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/park"
	"github.com/wowd/wowd/internal/testwait"
)

// A dead letter replayed into its source topic (as docs/operations.md
// suggests, once the cause is fixed) that fails again is dead-lettered with
// its new reason alone: one set of wowd-dlq-* headers, not the old set and
// the new one, which readers taking the first of a key would read as the
// old failure. The record's own headers stay.
func TestAReplayedDeadLetterCarriesOnlyItsNewReason(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		cl, err := kgo.NewClient(brokers(h.c)...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		replayed := &kgo.Record{Topic: testTopic, Key: []byte("k"), Value: []byte("v"), Headers: []kgo.RecordHeader{
			{Key: "trace", Value: []byte("t-1")},
			{Key: HeaderSourceTopic, Value: []byte(testTopic)},
			{Key: HeaderSourcePartition, Value: []byte("0")},
			{Key: HeaderSourceOffset, Value: []byte("99")},
			{Key: HeaderDispatcher, Value: []byte("old")},
			{Key: HeaderErrorClass, Value: []byte("timeout")},
			{Key: HeaderErrorMessage, Value: []byte("old reason")},
			{Key: HeaderAttempts, Value: []byte("9")},
		}}
		if err := cl.ProduceSync(context.Background(), replayed).FirstErr(); err != nil {
			t.Fatal(err)
		}
		hd := handler.Sync(func(context.Context, *handler.Message) error {
			return handler.WithAttempts(2, handler.Classed(handler.Permanent, errors.New("new reason")))
		})
		r := h.receiver("g-replay", hd, 8)
		testwait.For(t, 30*time.Second, "the record finished", func() bool { return h.committedAtEnd("g-replay") })
		stop(t, r)
		dl := dlqRecords(t, h.c, testTopic+".dlq", 1)
		if len(dl) != 1 {
			t.Fatalf("%d dead letters, want 1", len(dl))
		}
		count := map[string]int{}
		for _, hd := range dl[0].Headers {
			count[hd.Key]++
		}
		for k, n := range count {
			if strings.HasPrefix(k, "wowd-dlq-") && n != 1 {
				t.Errorf("header %s appears %d times: %v", k, n, dl[0].Headers)
			}
		}
		if header(dl[0], HeaderErrorMessage) != "new reason" || header(dl[0], HeaderAttempts) != "2" ||
			header(dl[0], HeaderSourceOffset) != "0" || header(dl[0], "trace") != "t-1" {
			t.Errorf("dead letter headers %v: want the new failure at offset 0 and the record's own trace header", dl[0].Headers)
		}
	})
}

// The same for a replayed dead letter that parks its aggregate and is
// skipped: its dead letter says why in its wowd-parked-* headers, and the
// earlier failure's wowd-dlq-* headers, which would contradict them, are
// not carried along.
func TestASkippedReplayedDeadLetterDropsItsOldReason(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		cl, err := kgo.NewClient(brokers(h.c)...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		replayed := &kgo.Record{Topic: testTopic, Key: []byte("agg-0"), Value: binary.BigEndian.AppendUint64(nil, 0),
			Headers: []kgo.RecordHeader{
				{Key: "trace", Value: []byte("t-1")},
				{Key: HeaderErrorMessage, Value: []byte("old reason")},
				{Key: HeaderSourceOffset, Value: []byte("99")},
			}}
		if err := cl.ProduceSync(context.Background(), replayed).FirstErr(); err != nil {
			t.Fatal(err)
		}
		sink := newParkSink(func(string, uint64) bool { return true })
		r := h.receiver("g-replay-park", sink, 8, parking)
		testwait.For(t, 30*time.Second, "agg-0 parked", func() bool { return h.parkedState("agg-0") != nil })
		h.ask("agg-0", park.Skip)
		testwait.For(t, 30*time.Second, "agg-0 unparked", func() bool { return h.parkedState("agg-0") == nil })
		stop(t, r)
		dl := dlqRecords(t, h.c, testTopic+".dlq", 1)
		if len(dl) != 1 {
			t.Fatalf("%d dead letters, want 1", len(dl))
		}
		for _, hd := range dl[0].Headers {
			if strings.HasPrefix(hd.Key, "wowd-dlq-") {
				t.Errorf("the skipped head's dead letter carries the earlier failure's %s=%q: %v", hd.Key, hd.Value, dl[0].Headers)
			}
		}
		if header(dl[0], park.HeaderReason) == "" || header(dl[0], "trace") != "t-1" {
			t.Errorf("dead letter headers %v: want its parking headers and its own trace header", dl[0].Headers)
		}
	})
}
