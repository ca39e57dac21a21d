package receiver

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/metrics"
	"github.com/wowd/wowd/internal/park"
	"github.com/wowd/wowd/internal/testwait"
	"github.com/wowd/wowd/internal/topicsize"
)

// incompressible returns n random bytes: a topic's limit counts compressed
// batches.
func incompressible(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	return b
}

// sizeAdmin returns an admin client of h's cluster and its close.
func (h *harness) sizeAdmin() (*kadm.Client, func()) {
	h.t.Helper()
	cl, err := kgo.NewClient(brokers(h.c)...)
	if err != nil {
		h.t.Fatal(err)
	}
	return kadm.NewClient(cl), cl.Close
}

func (h *harness) setMaxMessageBytes(topic string, n int) {
	h.t.Helper()
	adm, done := h.sizeAdmin()
	defer done()
	v := strconv.Itoa(n)
	rs, err := adm.AlterTopicConfigs(context.Background(), []kadm.AlterConfig{{Name: "max.message.bytes", Value: &v}}, topic)
	if err == nil {
		_, err = rs.On(topic, nil)
	}
	if err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) maxMessageBytes(topic string) int32 {
	h.t.Helper()
	adm, done := h.sizeAdmin()
	defer done()
	limits, err := topicsize.MaxMessageBytes(context.Background(), adm, topic)
	if err != nil {
		h.t.Fatal(err)
	}
	return limits[topic]
}

// produceLarge writes recs, which may be up to 16 MiB each.
func (h *harness) produceLarge(recs ...*kgo.Record) {
	h.t.Helper()
	cl, err := kgo.NewClient(append(brokers(h.c), kgo.ProducerBatchMaxBytes(16<<20))...)
	if err != nil {
		h.t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		h.t.Fatal(err)
	}
}

// bigFails fails for good every message larger than 1000 bytes and
// records the values of the others per aggregate.
type bigFails struct {
	mu      sync.Mutex
	handled map[string][]string
}

func (s *bigFails) Handle(_ context.Context, m *handler.Message, ack handler.Ack) {
	if len(m.Value) > 1000 {
		ack.Done(handler.Classed(handler.Permanent, errors.New("too big for the sink")))
		return
	}
	s.mu.Lock()
	if s.handled == nil {
		s.handled = make(map[string][]string)
	}
	s.handled[m.AggregateID] = append(s.handled[m.AggregateID], string(m.Value))
	s.mu.Unlock()
	ack.Done(nil)
}

func (s *bigFails) of(key string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.handled[key]...)
}

// parkActionCount returns wowd_parked_actions_total for action and result.
func parkActionCount(t *testing.T, m *metrics.Metrics, action, result string) float64 {
	return counterSum(t, m, "wowd_parked_actions_total", "action", action, "result", result)
}

// TestParkARecordNearItsSourcesLimit: a record that fits its source topic
// (whose max.message.bytes is raised to 10 MB) but not the parked topic
// with kgo's default batch limit, or with the same limit as the source once
// the parking headers are added, parks whole, and the commit moves past
// it. wowd created the parked topic with the source's limit plus
// parkHeadroom.
func TestParkARecordNearItsSourcesLimit(t *testing.T) {
	const limit = 10_000_000
	h := newHarness(t, 1)
	h.setMaxMessageBytes(testTopic, limit)
	big := incompressible(limit - 200)
	h.produceLarge(
		&kgo.Record{Topic: testTopic, Key: []byte("agg-0"), Value: big, Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("t")}}},
		&kgo.Record{Topic: testTopic, Key: []byte("agg-1"), Value: []byte("small")},
		&kgo.Record{Topic: testTopic, Key: []byte("agg-0"), Value: []byte("after")},
	)
	sink := &bigFails{}
	r := h.receiver("g-park-large", sink, 16, parking)
	testwait.For(t, 30*time.Second, "the commit to reach the end", func() bool { return h.committedAtEnd("g-park-large") })
	stop(t, r)
	if got := h.maxMessageBytes(park.Topic(testTopic)); got != limit+parkHeadroom {
		t.Errorf("parked topic created with max.message.bytes %d, want %d", got, limit+parkHeadroom)
	}
	if got := sink.of("agg-1"); len(got) != 1 {
		t.Errorf("agg-1 handled %q, want [small]", got)
	}
	if got := sink.of("agg-0"); len(got) != 0 {
		t.Errorf("agg-0 handled %q while parked", got)
	}
	parked := dlqRecords(t, h.c, park.Topic(testTopic), 2)
	if len(parked) != 2 || len(parked[0].Value) != len(big) || header(parked[0], "trace") != "t" ||
		header(parked[0], park.HeaderSourceOffset) != "0" || string(parked[1].Value) != "after" {
		t.Fatalf("parked topic holds %d records, want agg-0's two, the large one whole", len(parked))
	}
	if st := h.parkedState("agg-0"); st == nil || st.Offset != 0 {
		t.Fatalf("parked state of agg-0: %+v", st)
	}
}

// TestParkARecordItsProducerCompressed: a record of 4 MB that its
// producer compressed to fit its source topic's default limit parks whole:
// the client checks its batch limit before compressing, and wowd created
// the parked topic with at least minParkedMaxBytes.
func TestParkARecordItsProducerCompressed(t *testing.T) {
	h := newHarness(t, 1)
	big := make([]byte, 4_000_000)
	for i := range big {
		big[i] = byte(i % 7)
	}
	h.produceLarge( // snappy, kgo's default
		&kgo.Record{Topic: testTopic, Key: []byte("agg-0"), Value: big},
		&kgo.Record{Topic: testTopic, Key: []byte("agg-1"), Value: []byte("small")},
	)
	sink := &bigFails{}
	r := h.receiver("g-park-compressed", sink, 16, parking)
	testwait.For(t, 30*time.Second, "the commit to reach the end", func() bool { return h.committedAtEnd("g-park-compressed") })
	stop(t, r)
	if got := h.maxMessageBytes(park.Topic(testTopic)); got != minParkedMaxBytes {
		t.Errorf("parked topic created with max.message.bytes %d, want %d", got, minParkedMaxBytes)
	}
	parked := dlqRecords(t, h.c, park.Topic(testTopic), 1)
	if len(parked) != 1 || len(parked[0].Value) != len(big) {
		t.Fatalf("parked topic holds %d records, want agg-0's whole", len(parked))
	}
}

// TestParkIntoASmallPreCreatedParkedTopic: an operator created the parked
// topic with a max.message.bytes smaller than a record of its source. The
// failed record is neither dropped nor committed past: wowd warns at start,
// logs an error naming the parked topic and max.message.bytes at each
// attempt, counts it as a failed park, and retries. Once the operator
// raised the limit and restarted wowd, the record parks whole.
func TestParkIntoASmallPreCreatedParkedTopic(t *testing.T) {
	h := newHarness(t, 1)
	if err := h.c.CreateTopic(park.Topic(testTopic), 1, map[string]string{"max.message.bytes": "4000"}); err != nil {
		t.Fatal(err)
	}
	big := incompressible(5000)
	h.produceLarge(
		&kgo.Record{Topic: testTopic, Key: []byte("agg-0"), Value: big},
		&kgo.Record{Topic: testTopic, Key: []byte("agg-1"), Value: []byte("small")},
	)
	sink := &bigFails{}
	core, logs := observer.New(zap.InfoLevel)
	m := metrics.New("test")
	opts := func(o *Options) {
		parking(o)
		o.RetryBackoff = 50 * time.Millisecond
		o.Logger = zap.New(zapcore.NewTee(o.Logger.Core(), core))
		o.Metrics = m
	}
	r := h.receiver("g-park-small", sink, 16, opts)
	const msg = "parked copy too large for the parked topic"
	testwait.For(t, 30*time.Second, "the too-large error logged twice", func() bool { return logs.FilterMessageSnippet(msg).Len() >= 2 })
	testwait.For(t, 10*time.Second, "agg-1 handled", func() bool { return len(sink.of("agg-1")) == 1 })
	time.Sleep(200 * time.Millisecond) // commits every 50 ms
	if committed, _ := h.offsets("g-park-small"); committed[0] > 0 {
		t.Fatalf("committed %d, past the record that could not be parked", committed[0])
	}
	e := logs.FilterMessageSnippet(msg).All()[0]
	if e.Level != zap.ErrorLevel || e.ContextMap()["parked_topic"] != park.Topic(testTopic) || e.ContextMap()["max_message_bytes"] != int32(4000) {
		t.Errorf("too-large log: %v %q %v", e.Level, e.Message, e.ContextMap())
	}
	if w := logs.FilterMessageSnippet("parked topic's max.message.bytes is below").Len(); w != 1 {
		t.Errorf("%d warnings at start of the small parked topic, want 1", w)
	}
	if n := parkActionCount(t, m, "park", "failed"); n < 2 {
		t.Errorf("parked_actions_total{park,failed} %v, want at least 2", n)
	}
	// The record is unfinished: the stop lets it go at its deadline.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = r.Stop(ctx)
	cancel()

	h.setMaxMessageBytes(park.Topic(testTopic), 1_000_000)
	r = h.receiver("g-park-small", sink, 16, parking)
	testwait.For(t, 30*time.Second, "the commit to reach the end", func() bool { return h.committedAtEnd("g-park-small") })
	stop(t, r)
	parked := dlqRecords(t, h.c, park.Topic(testTopic), 1)
	if len(parked) != 1 || len(parked[0].Value) != len(big) {
		t.Fatalf("parked topic holds %d records, want agg-0's whole", len(parked))
	}
}

// TestSkipATooLargeParkedHeadWritesAStub: a skip whose head is too large
// for the dead-letter topic writes a stub dead letter (no value, no source
// headers, its parking headers), redrives the rest and unparks the
// aggregate, as the dead-letter path does, rather than retry forever.
func TestSkipATooLargeParkedHeadWritesAStub(t *testing.T) {
	h := newHarness(t, 1)
	if err := h.c.CreateTopic(testTopic+".dlq", 1, map[string]string{"max.message.bytes": "4000"}); err != nil {
		t.Fatal(err)
	}
	h.produceLarge(
		&kgo.Record{Topic: testTopic, Key: []byte("agg-0"), Value: incompressible(5000), Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("t")}}},
		&kgo.Record{Topic: testTopic, Key: []byte("agg-0"), Value: []byte("after")},
	)
	sink := &bigFails{}
	r := h.receiver("g-skip-large", sink, 16, parking)
	defer stop(t, r)
	testwait.For(t, 30*time.Second, "agg-0 parked", func() bool {
		return h.committedAtEnd("g-skip-large") && r.Snapshot().ParkedAggregates == 1
	})
	h.ask("agg-0", park.Skip)
	testwait.For(t, 30*time.Second, "agg-0 unparked", func() bool {
		return h.parkedState("agg-0") == nil && r.Snapshot().ParkedAggregates == 0
	})
	if got := sink.of("agg-0"); len(got) != 1 || got[0] != "after" {
		t.Fatalf("agg-0 handled %q, want [after]", got)
	}
	dl := dlqRecords(t, h.c, testTopic+".dlq", 1)
	if len(dl) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dl))
	}
	stub := dl[0]
	if len(stub.Value) != 0 || header(stub, HeaderValueOmitted) != "5000" || header(stub, HeaderHeadersOmitted) != "1" ||
		header(stub, "trace") != "" || header(stub, park.HeaderSourceOffset) != "0" || header(stub, park.HeaderSourceTopic) != testTopic ||
		header(stub, park.HeaderReason) == "" || string(stub.Key) != "agg-0" {
		t.Fatalf("dead letter of the large head: value %d bytes, headers %v", len(stub.Value), stub.Headers)
	}
}

// TestParkTooLargeWithTheLimitUnread: wowd could not read the parked
// topic's max.message.bytes at start (no DescribeConfigs), so its client
// keeps to kgo's 1000012-byte batches to it whatever the topic allows. A
// failed record above that waits, and the error says why: the limit was
// not read, and a restart that can read it is what helps (raising the
// limit alone would not).
func TestParkTooLargeWithTheLimitUnread(t *testing.T) {
	h := newHarness(t, 1)
	if err := h.c.CreateTopic(park.Topic(testTopic), 1, map[string]string{"max.message.bytes": "8388608"}); err != nil {
		t.Fatal(err)
	}
	h.setMaxMessageBytes(testTopic, 2_000_000)
	denied := h.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.DescribeConfigs}, Err: kerr.TopicAuthorizationFailed, Count: -1})
	defer denied.Remove()
	h.produceLarge(&kgo.Record{Topic: testTopic, Key: []byte("agg-0"), Value: incompressible(1_100_000)})
	core, logs := observer.New(zap.InfoLevel)
	r := h.receiver("g-park-unread", &bigFails{}, 16, func(o *Options) {
		parking(o)
		o.RetryBackoff = 50 * time.Millisecond
		o.Logger = zap.New(zapcore.NewTee(o.Logger.Core(), core))
	})
	const msg = "parked copy too large for the parked topic, whose max.message.bytes wowd could not read at start"
	testwait.For(t, 30*time.Second, "the too-large error logged", func() bool { return logs.FilterMessageSnippet(msg).Len() >= 1 })
	if n := logs.FilterMessageSnippet("raise the parked topic's max.message.bytes").Len(); n != 0 {
		t.Errorf("%d errors advising to raise a limit that is high enough already", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = r.Stop(ctx) // the record is unfinished: the stop lets it go at its deadline
	cancel()
	if committed, _ := h.offsets("g-park-unread"); committed[0] > 0 {
		t.Fatalf("committed %d, past the record that could not be parked", committed[0])
	}
}
