package receiver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/metrics"
	"github.com/wowd/wowd/internal/testwait"
)

// dlqRecords reads every record of topic.
func dlqRecords(t *testing.T, c *kfake.Cluster, topic string, want int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(append(brokers(c), kgo.ConsumeTopics(topic),
		kgo.ConsumeStartOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for len(out) < want || want == 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

// deadSeqs returns the sequence numbers (produce's values) of the dead
// letters in testTopic's dead-letter topic, in order.
func deadSeqs(t *testing.T, c *kfake.Cluster) []uint64 {
	t.Helper()
	var out []uint64
	for _, rec := range dlqRecords(t, c, testTopic+".dlq", 0) {
		out = append(out, binary.BigEndian.Uint64(rec.Value))
	}
	return out
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func TestPermanentFailuresAreDeadLettered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const records, keys = 1000, 20
		h := newVirtualHarness(t, 4)
		produce(t, h.c, testTopic, records, keys)
		var handled atomic.Int64
		// Every 100th record (value seq 5 of some keys) fails permanently.
		hd := handler.Sync(func(_ context.Context, m *handler.Message) error {
			if m.Offset%100 == 7 {
				return handler.WithAttempts(3, handler.Classed(handler.Permanent, errors.New("422 from sink")))
			}
			handled.Add(1)
			return nil
		})
		r := h.receiver("g-dlq", hd, 64)
		var poison int64
		_, end := h.offsets("g-dlq")
		for _, e := range end {
			poison += (e + 92) / 100 // offsets 7, 107, 207, ... below e
		}
		testwait.For(t, 30*time.Second, "every record finished", func() bool { return h.committedAtEnd("g-dlq") })
		stop(t, r)
		if got := handled.Load() + poison; got != records {
			t.Fatalf("handled %d + dead-lettered %d != %d", handled.Load(), poison, records)
		}
		dl := dlqRecords(t, h.c, testTopic+".dlq", int(poison))
		if int64(len(dl)) != poison {
			t.Fatalf("%d dead letters, want %d", len(dl), poison)
		}
		for _, r := range dl {
			off, _ := strconv.ParseInt(header(r, HeaderSourceOffset), 10, 64)
			if header(r, HeaderSourceTopic) != testTopic || off%100 != 7 || header(r, HeaderErrorClass) != "permanent" ||
				header(r, HeaderAttempts) != "3" || header(r, HeaderErrorMessage) != "422 from sink" || len(r.Key) == 0 {
				t.Fatalf("dead letter headers %v key %q", r.Headers, r.Key)
			}
		}
	})
}

func TestFailedDeadLetterWriteBlocksTheCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		produce(t, h.c, testTopic, 10, 1)
		// Writes to the dead-letter topic are refused until the fault goes.
		fault := h.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: testTopic + ".dlq",
			Err: kerr.TopicAuthorizationFailed, Count: -1})
		hd := handler.Sync(func(_ context.Context, m *handler.Message) error {
			if m.Offset == 3 {
				return handler.Classed(handler.Permanent, errors.New("rejected"))
			}
			return nil
		})
		r := h.receiver("g-dlq-fail", hd, 16, func(o *Options) { o.RetryBackoff = time.Second })
		testwait.For(t, 10*time.Second, "two refused writes", func() bool { return fault.Hits() >= 2 })
		time.Sleep(200 * time.Millisecond) // commits run every 50ms
		committed, _ := h.offsets("g-dlq-fail")
		if committed[0] > 3 {
			t.Fatalf("committed %d past the record whose dead-letter write failed", committed[0])
		}
		// Once writes go through, the commit moves on.
		fault.Remove()
		testwait.For(t, 30*time.Second, "the commit to reach the end", func() bool {
			c, end := h.offsets("g-dlq-fail")
			return c[0] == end[0]
		})
		stop(t, r)
		if n := len(dlqRecords(t, h.c, testTopic+".dlq", 1)); n != 1 {
			t.Fatalf("%d dead letters, want 1", n)
		}
	})
}

// A dead-letter write refused for good (no permission on the topic) does not
// hold the partition forever: after its attempts the record is given up,
// counted and committed past.
func TestDeadLetterWriteRefusedForGoodIsGivenUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		produce(t, h.c, testTopic, 10, 1)
		fault := h.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: testTopic + ".dlq",
			Err: kerr.TopicAuthorizationFailed, Count: -1})
		hd := handler.Sync(func(_ context.Context, m *handler.Message) error {
			if m.Offset == 3 {
				return handler.Classed(handler.Permanent, errors.New("rejected"))
			}
			return nil
		})
		m := metrics.New("test")
		r := h.receiver("g-dlq-refused", hd, 16, func(o *Options) {
			o.RetryBackoff = 20 * time.Millisecond
			o.Metrics = m
		})
		testwait.For(t, 30*time.Second, "the commit to reach the end", func() bool { return h.committedAtEnd("g-dlq-refused") })
		stop(t, r)
		if hits := fault.Hits(); hits < deadLetterAttempts {
			t.Fatalf("%d writes refused, want %d attempts before giving up", hits, deadLetterAttempts)
		}
		if n := outcomeCount(t, m, "dead_letter_failed"); n != 1 {
			t.Fatalf("dead_letter_failed %v, want 1", n)
		}
	})
}

// A record too large for the dead-letter topic once the provenance headers
// are added is dead-lettered without its value and headers, flagged.
func TestDeadLetterTooLargeIsWrittenWithoutItsValue(t *testing.T) {
	h := newHarness(t, 1)
	if err := h.c.CreateTopic(testTopic+".dlq", 1, map[string]string{"max.message.bytes": "2000"}); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(brokers(h.c)...)
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 5000)
	for i := range big {
		big[i] = byte(rand.Uint32()) // incompressible: the topic's limit counts compressed batches
	}
	if err := cl.ProduceSync(context.Background(),
		&kgo.Record{Topic: testTopic, Key: []byte("agg"), Value: big, Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("t")}}},
		&kgo.Record{Topic: testTopic, Key: []byte("agg"), Value: []byte("small")},
	).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	hd := handler.Sync(func(_ context.Context, m *handler.Message) error {
		return handler.Classed(handler.Permanent, errors.New("rejected"))
	})
	r := h.receiver("g-dlq-large", hd, 16)
	testwait.For(t, 30*time.Second, "the commit to reach the end", func() bool { return h.committedAtEnd("g-dlq-large") })
	stop(t, r)
	dl := dlqRecords(t, h.c, testTopic+".dlq", 2)
	if len(dl) != 2 {
		t.Fatalf("%d dead letters, want 2", len(dl))
	}
	stub, whole := dl[0], dl[1]
	if len(stub.Value) != 0 || header(stub, HeaderValueOmitted) != "5000" || header(stub, HeaderHeadersOmitted) != "1" ||
		header(stub, "trace") != "" || header(stub, HeaderSourceOffset) != "0" || string(stub.Key) != "agg" {
		t.Fatalf("dead letter of the large record: value %d bytes, headers %v", len(stub.Value), stub.Headers)
	}
	if string(whole.Value) != "small" || header(whole, HeaderValueOmitted) != "" {
		t.Fatalf("dead letter of the small record: value %q, headers %v", whole.Value, whole.Headers)
	}
}

// outcomeCount returns wowd_messages_total for one outcome, summed.
func outcomeCount(t *testing.T, m *metrics.Metrics, outcome string) float64 {
	return counterSum(t, m, "wowd_messages_total", "outcome", outcome)
}

// counterSum returns the sum of the counter name's series whose labels
// have the given values (label, value pairs).
func counterSum(t *testing.T, m *metrics.Metrics, name string, labelValues ...string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, s := range mf.Metric {
			for i := 0; i+1 < len(labelValues); i += 2 {
				if !hasLabel(s.GetLabel(), labelValues[i], labelValues[i+1]) {
					continue series
				}
			}
			sum += s.GetCounter().GetValue()
		}
	}
	return sum
}

func hasLabel(labels []*dto.LabelPair, name, value string) bool {
	for _, l := range labels {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

func TestSinkOutageBacksOffWithoutDeadLetters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const records, keys = 400, 40
		h := newVirtualHarness(t, 4)
		produce(t, h.c, testTopic, records, keys)
		var down atomic.Bool
		down.Store(true)
		var attempts, handled atomic.Int64
		hd := handler.Sync(func(_ context.Context, m *handler.Message) error {
			attempts.Add(1)
			if down.Load() {
				return handler.Classed(handler.Transient, errors.New("503"))
			}
			handled.Add(1)
			return nil
		})
		r := h.receiver("g-outage", asyncHandler{hd}, 64, func(o *Options) { o.RetryBackoff = 300 * time.Millisecond })
		testwait.For(t, 10*time.Second, "the receiver to back off", func() bool { return r.Snapshot().BackingOff })
		time.Sleep(2 * time.Second)
		duringOutage := attempts.Load()
		down.Store(false)
		testwait.For(t, 60*time.Second, "every record finished", func() bool { return h.committedAtEnd("g-outage") })
		if r.Snapshot().BackingOff {
			t.Fatal("still backing off after recovery")
		}
		stop(t, r)
		// Without backoff, 64 messages retried at once for 2+ s would make
		// thousands of attempts; held messages are retried with growing waits.
		if duringOutage > 64*12 {
			t.Fatalf("%d attempts during the outage: not backing off", duringOutage)
		}
		// A handler that reports failures at once (no retries of its own) gets
		// the failures before the streak is recognized dead-lettered: fewer than
		// streakRun. An HTTP sink retries first, so its streak shows earlier.
		dl := dlqRecords(t, h.c, testTopic+".dlq", 0)
		if len(dl) >= streakRun {
			t.Fatalf("%d dead letters during an outage", len(dl))
		}
		if got := handled.Load() + int64(len(dl)); got != records {
			t.Fatalf("handled %d + dead-lettered %d != %d", handled.Load(), len(dl), records)
		}
		t.Logf("%d attempts and %d dead letters during the outage", duringOutage, len(dl))
	})
}

// An attempt made while the sink was down can report its failure after the
// sink came back and a success ended the backoff (an HTTP request timing out
// late, say). That failure is the outage's: the message is held and retried,
// not dead-lettered.
func TestStragglerOfAnOutageIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const records, keys = 40, 8
		h := newVirtualHarness(t, 4)
		produce(t, h.c, testTopic, records, keys)
		type at struct {
			p int32
			o int64
		}
		var (
			down      atomic.Bool
			mu        sync.Mutex // guards handled and straggler
			handled   = map[at]bool{}
			straggler *at
			held      = make(chan handler.Ack, 1)
		)
		down.Store(true)
		transient := handler.Classed(handler.Transient, errors.New("503"))
		hd := handlerFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
			if down.Load() {
				mu.Lock()
				first := straggler == nil
				if first {
					straggler = &at{m.Partition, m.Offset}
				}
				mu.Unlock()
				if first {
					held <- ack // answered only after the outage
					return
				}
				go ack.Done(transient)
				return
			}
			mu.Lock()
			handled[at{m.Partition, m.Offset}] = true
			mu.Unlock()
			go ack.Done(nil)
		})
		r := h.receiver("g-straggler", hd, 64, func(o *Options) { o.RetryBackoff = 100 * time.Millisecond })
		ack := <-held
		testwait.For(t, 10*time.Second, "the receiver to back off", func() bool { return r.Snapshot().BackingOff })
		down.Store(false)
		testwait.For(t, 30*time.Second, "a success to end the backoff", func() bool { return !r.Snapshot().BackingOff })
		ack.Done(transient) // the attempt from the outage fails now
		testwait.For(t, 30*time.Second, "every record finished", func() bool { return h.committedAtEnd("g-straggler") })
		stop(t, r)
		mu.Lock()
		defer mu.Unlock()
		if !handled[*straggler] {
			t.Fatalf("the straggler at partition %d offset %d was not retried after the outage (dead-lettered)", straggler.p, straggler.o)
		}
	})
}

// handlerFunc is a handler.Handler that acknowledges as it likes.
type handlerFunc func(ctx context.Context, m *handler.Message, ack handler.Ack)

func (f handlerFunc) Handle(ctx context.Context, m *handler.Message, ack handler.Ack) { f(ctx, m, ack) }

// Tries that fail because their partition went (lost here, revoked or
// stopping alike) are no news about the sink: they do not make the receiver
// back off.
func TestCanceledTriesDoNotStartABackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const records = 40
		h := newVirtualHarness(t, 1)
		produce(t, h.c, testTopic, records, records)
		var running atomic.Int64
		hd := handlerFunc(func(ctx context.Context, m *handler.Message, ack handler.Ack) {
			running.Add(1)
			go func() {
				<-ctx.Done() // answers only when its partition goes
				ack.Done(fmt.Errorf("request canceled: %w", ctx.Err()))
			}()
		})
		r := h.receiver("g-canceled", hd, 64)
		testwait.For(t, 10*time.Second, "every record in a try", func() bool { return running.Load() == records })
		r.onLost(context.Background(), r.cl, map[string][]int32{testTopic: {0}})
		time.Sleep(100 * time.Millisecond) // the canceled tries report
		if r.Snapshot().BackingOff {
			t.Fatal("backing off after tries were canceled by the partition's loss")
		}
		r.onAssigned(context.Background(), r.cl, map[string][]int32{testTopic: {0}}) // as the rejoin would
		stop(t, r)
	})
}
