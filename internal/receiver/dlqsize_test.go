package receiver

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/testwait"
)

// allFail fails every message for good.
var allFail = handler.Sync(func(context.Context, *handler.Message) error {
	return handler.Classed(handler.Permanent, errors.New("rejected"))
})

// wholeDeadLetter reports whether dl is the whole dead letter of a record
// of value, with its "trace" header, at offset.
func wholeDeadLetter(dl *kgo.Record, value []byte, offset int) bool {
	return string(dl.Value) == string(value) && header(dl, "trace") == "t" && header(dl, HeaderValueOmitted) == "" &&
		header(dl, HeaderSourceOffset) == strconv.Itoa(offset)
}

// stubDeadLetter reports whether dl is the stub dead letter (no value, no
// source headers) of a record of n bytes with one header, at offset.
func stubDeadLetter(dl *kgo.Record, n, offset int) bool {
	return len(dl.Value) == 0 && header(dl, HeaderValueOmitted) == strconv.Itoa(n) && header(dl, HeaderHeadersOmitted) == "1" &&
		header(dl, "trace") == "" && header(dl, HeaderSourceOffset) == strconv.Itoa(offset)
}

// TestDeadLetterARecordNearItsSourcesLimit: a record of 1.5 MB, which its
// source topic (max.message.bytes 2 MB) allows but kgo's default batch
// limit and the broker's default max.message.bytes do not, fails for good
// and is dead-lettered whole: wowd created the dead-letter topic with the
// source's limit plus deadLetterHeadroom, read it at start, and its
// client's batches to it keep to it.
func TestDeadLetterARecordNearItsSourcesLimit(t *testing.T) {
	const limit = 2_000_000
	h := newHarness(t, 1)
	h.setMaxMessageBytes(testTopic, limit)
	big := incompressible(1_500_000)
	h.produceLarge(
		&kgo.Record{Topic: testTopic, Key: []byte("agg"), Value: big, Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("t")}}},
		&kgo.Record{Topic: testTopic, Key: []byte("agg"), Value: []byte("small"), Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("t")}}},
	)
	core, logs := observer.New(zap.InfoLevel)
	r := h.receiver("g-dlq-near", allFail, 16, func(o *Options) {
		o.Logger = zap.New(zapcore.NewTee(o.Logger.Core(), core))
	})
	testwait.For(t, 30*time.Second, "the commit to reach the end", func() bool { return h.committedAtEnd("g-dlq-near") })
	stop(t, r)
	if n := logs.FilterMessageSnippet("dead-letter topic's max.message.bytes is below").Len(); n != 0 {
		t.Errorf("%d warnings of a small dead-letter topic, for one wowd created large enough", n)
	}
	if got := h.maxMessageBytes(testTopic + ".dlq"); got != limit+deadLetterHeadroom {
		t.Errorf("dead-letter topic created with max.message.bytes %d, want %d", got, limit+deadLetterHeadroom)
	}
	dl := dlqRecords(t, h.c, testTopic+".dlq", 2)
	if len(dl) != 2 {
		t.Fatalf("%d dead letters, want 2", len(dl))
	}
	if !wholeDeadLetter(dl[0], big, 0) {
		t.Fatalf("dead letter of the large record: value %d bytes, headers %v; want it whole", len(dl[0].Value), dl[0].Headers)
	}
	if !wholeDeadLetter(dl[1], []byte("small"), 1) {
		t.Fatalf("dead letter of the small record: value %q, headers %v", dl[1].Value, dl[1].Headers)
	}
}

// TestDeadLetterIntoASmallPreCreatedTopic: an operator created the
// dead-letter topic with a max.message.bytes of 4000. A failed record
// larger than that is dead-lettered as a stub, as before; small failed
// records, each within the limit but not together, are dead-lettered whole:
// the client's batches to the topic keep to its limit, so they are never
// refused for their sum (and stubbed for it). wowd warns of the small
// topic once at start, with what it would need, and its stub's log line
// gives the record's size and the topic's limit.
func TestDeadLetterIntoASmallPreCreatedTopic(t *testing.T) {
	h := newHarness(t, 1)
	if err := h.c.CreateTopic(testTopic+".dlq", 1, map[string]string{"max.message.bytes": "4000"}); err != nil {
		t.Fatal(err)
	}
	h.setMaxMessageBytes(testTopic, 2_000_000)
	big := incompressible(5000)
	recs := []*kgo.Record{{Topic: testTopic, Key: []byte("agg-big"), Value: big, Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("t")}}}}
	const smalls = 20
	for i := range smalls {
		recs = append(recs, &kgo.Record{Topic: testTopic, Key: []byte("agg-" + strconv.Itoa(i)), Value: incompressible(1500),
			Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("t")}}})
	}
	h.produceLarge(recs...)
	core, logs := observer.New(zap.InfoLevel)
	r := h.receiver("g-dlq-small", allFail, 64, func(o *Options) {
		o.Logger = zap.New(zapcore.NewTee(o.Logger.Core(), core))
	})
	testwait.For(t, 30*time.Second, "the commit to reach the end", func() bool { return h.committedAtEnd("g-dlq-small") })
	stop(t, r)
	small := logs.FilterMessageSnippet("dead-letter topic's max.message.bytes is below").All()
	if len(small) != 1 {
		t.Errorf("%d warnings of the small dead-letter topic, want 1", len(small))
	} else if f := small[0].ContextMap(); f["max_message_bytes"] != int32(4000) || f["want"] != int32(2_000_000+deadLetterHeadroom) {
		t.Errorf("warning of the small dead-letter topic: %v; want max_message_bytes 4000, want %d", f, 2_000_000+deadLetterHeadroom)
	}
	stubbedLog := logs.FilterMessageSnippet("record too large for the dead-letter topic").All()
	if len(stubbedLog) != 1 {
		t.Errorf("%d log lines of a stubbed dead letter, want 1", len(stubbedLog))
	} else if f := stubbedLog[0].ContextMap(); f["max_message_bytes"] != int32(4000) || f["record_bytes"].(int64) <= 5000 {
		t.Errorf("log of the stubbed dead letter: %v; want max_message_bytes 4000 and record_bytes over 5000", f)
	}
	if got := h.maxMessageBytes(testTopic + ".dlq"); got != 4000 {
		t.Errorf("dead-letter topic's max.message.bytes %d, want the operator's 4000", got)
	}
	dl := dlqRecords(t, h.c, testTopic+".dlq", 1+smalls)
	if len(dl) != 1+smalls {
		t.Fatalf("%d dead letters, want %d", len(dl), 1+smalls)
	}
	byOffset := make(map[string]*kgo.Record)
	for _, d := range dl {
		byOffset[header(d, HeaderSourceOffset)] = d
	}
	if d := byOffset["0"]; d == nil || !stubDeadLetter(d, len(big), 0) {
		t.Fatalf("dead letter of the large record: %v; want a stub", d)
	}
	stubbed := 0
	for i := range smalls {
		if d := byOffset[strconv.Itoa(i+1)]; d == nil || !wholeDeadLetter(d, recs[i+1].Value, i+1) {
			stubbed++
		}
	}
	if stubbed > 0 {
		t.Fatalf("%d of %d small records, each within the dead-letter topic's limit, not dead-lettered whole", stubbed, smalls)
	}
}

// TestDeadLetterSizeUnread: wowd cannot read max.message.bytes (no
// DescribeConfigs). It warns once at start of the consumed topics and once
// of the dead-letter topics, and behaves as before: the dead-letter topic
// it creates gets the cluster's default, its client keeps to kgo's default
// batches, and a 1.5 MB record is dead-lettered as a stub, even to a
// dead-letter topic that would allow it.
func TestDeadLetterSizeUnread(t *testing.T) {
	for _, preCreated := range []bool{false, true} {
		t.Run("pre-created "+strconv.FormatBool(preCreated), func(t *testing.T) {
			h := newHarness(t, 1)
			if preCreated {
				if err := h.c.CreateTopic(testTopic+".dlq", 1, map[string]string{"max.message.bytes": "8388608"}); err != nil {
					t.Fatal(err)
				}
			}
			h.setMaxMessageBytes(testTopic, 2_000_000)
			denied := h.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.DescribeConfigs}, Err: kerr.TopicAuthorizationFailed, Count: -1})
			big := incompressible(1_500_000)
			h.produceLarge(&kgo.Record{Topic: testTopic, Key: []byte("agg"), Value: big, Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("t")}}})
			core, logs := observer.New(zap.InfoLevel)
			r := h.receiver("g-dlq-unread", allFail, 16, func(o *Options) {
				o.Logger = zap.New(zapcore.NewTee(o.Logger.Core(), core))
			})
			testwait.For(t, 30*time.Second, "the commit to reach the end", func() bool { return h.committedAtEnd("g-dlq-unread") })
			stop(t, r)
			denied.Remove()
			for _, msg := range []string{"reading the consumed topics' max.message.bytes", "reading the dead-letter topics' max.message.bytes"} {
				if n := logs.FilterMessageSnippet(msg).FilterLevelExact(zapcore.WarnLevel).Len(); n != 1 {
					t.Errorf("%d warnings %q, want 1", n, msg)
				}
			}
			want := int32(1048588) // kfake's default
			if preCreated {
				want = 8388608
			}
			if got := h.maxMessageBytes(testTopic + ".dlq"); got != want {
				t.Errorf("dead-letter topic's max.message.bytes %d, want %d", got, want)
			}
			dl := dlqRecords(t, h.c, testTopic+".dlq", 1)
			if len(dl) != 1 || !stubDeadLetter(dl[0], len(big), 0) {
				t.Fatalf("dead letters %v; want one stub", dl)
			}
		})
	}
}

// TestDeadLetterOfASourceCreatedAfterStart: the consumed topic does not
// exist when the receiver starts, so no dead-letter topic is made for it
// then. Created later, its first record fails for good: the dead-letter
// write, refused as to an unknown topic, makes the dead-letter topic and
// writes the dead letter, instead of giving the record up after its
// attempts and committing past it (found by review).
func TestDeadLetterOfASourceCreatedAfterStart(t *testing.T) {
	h := harnessOn(t, newCluster(t, 1))
	r := h.receiver("g-dlq-late", allFail, 64)
	defer stop(t, r)
	if err := h.c.CreateTopic(testTopic, 1, nil); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: testTopic, Key: []byte("agg-0"), Value: []byte("v"),
		Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("t")}}}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 60*time.Second, "the commit to reach the end", func() bool { return h.committedAtEnd("g-dlq-late") })
	if dl := dlqRecords(t, h.c, testTopic+".dlq", 1); len(dl) != 1 || !wholeDeadLetter(dl[0], []byte("v"), 0) {
		t.Fatalf("dead letters %v, want the record's, whole", dl)
	}
}
