package receiver

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/wowd/wowd/internal/park"
	"github.com/wowd/wowd/internal/topicsize"
)

// The size of parked copies. A parked copy is its source record plus
// wowd's nine parking headers, so a record near its source topic's
// max.message.bytes does not fit a parked topic with the same limit; and
// the client checks its batch limit before compressing, so a record its
// producer compressed to fit its source may not fit either. wowd creates a
// parked topic with its source's max.message.bytes plus parkHeadroom, at
// least minParkedMaxBytes, and the client's batches to a parked topic keep
// to that topic's own limit (read at start, see sizeParkedTopics), so that
// small parked copies batched together are never refused for their sum. A
// parked copy still refused as too large (a parked topic created with a
// smaller limit, a record compressed more than eightfold) holds its
// partition, logged with what to raise (see parkTooLarge): it is never
// dropped.

// parkHeadroom is what a parked topic's max.message.bytes has above its
// source's: the parking headers (a reason of up to maxErrorHeader bytes,
// the source topic of up to 249, the service and dispatcher names, six
// short values and the keys) and their framing take under 2 KiB with
// names of a sane length; 64 KiB costs nothing on the broker.
const parkHeadroom = 64 << 10

// minParkedMaxBytes is the least max.message.bytes of a parked topic wowd
// creates, and that of one whose source's cannot be read (no
// DescribeConfigs): 8 MiB, eight times Kafka's default, room for a record
// its producer compressed to fit its source, and within what managed
// clusters allow.
const minParkedMaxBytes = 8 << 20

// parkSizes are the sizes read at start (ensureParkingTopics).
type parkSizes struct {
	// limit is, by parked topic, its max.message.bytes: the client's
	// batches to it keep to it (batchMaxBytes).
	limit map[string]int32
	// want is, by source topic, the max.message.bytes its parked topic
	// needs for a parked copy of any record of it written uncompressed:
	// the source's plus parkHeadroom. Missing where the source's could not
	// be read.
	want map[string]int32
}

// batchMaxBytes is the receiver client's ProducerBatchMaxBytesFn: a parked
// or dead-letter topic's own max.message.bytes, once read, and kgo's
// default for every other topic (and for one whose limit was not read).
// kgo asks once per partition, when the first produce to its topic learns
// it, which comes after Start read the sizes: parking writes wait for
// ps.ready, dead-letter writes come from fetched records, handled only
// after Start (see deadLetter).
func (r *Receiver) batchMaxBytes(topic string) int32 {
	if r.park != nil {
		if s := r.park.sizes.Load(); s != nil {
			if n, ok := s.limit[topic]; ok {
				return n
			}
		}
	}
	if n, ok := r.deadLetterLimit(topic); ok {
		return n
	}
	return topicsize.DefaultBatchMax
}

// sourceMaxBytes returns the max.message.bytes of the consumed topics
// sources, read at start for the dead-letter topics (ensureDeadLetterTopics)
// and the parked ones (ensureParkingTopics): one read is not asked for
// again (one not read is, by the next caller), and a failure to read is
// warned of once. A source whose limit cannot be read is missing. Called
// by Start and by a late dead-letter topic creation (from a job, possibly
// of a local record while Start runs): one at a time, under s.mu.
func (r *Receiver) sourceMaxBytes(ctx context.Context, adm *kadm.Client, sources []string) map[string]int32 {
	s := &r.srcMax
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.limit == nil {
		s.limit = make(map[string]int32, len(sources))
	}
	var unread []string
	for _, src := range sources {
		if _, ok := s.limit[src]; !ok {
			unread = append(unread, src)
		}
	}
	if len(unread) > 0 {
		limits, err := topicsize.MaxMessageBytes(ctx, adm, unread...)
		maps.Copy(s.limit, limits)
		if err != nil && !s.warned {
			s.warned = true
			r.log.Warn("reading the consumed topics' max.message.bytes (needs DescribeConfigs on them); a parked topic wowd creates for one it cannot read gets 8 MiB, a dead-letter topic the cluster's default",
				zap.Error(err))
		}
	}
	out := make(map[string]int32, len(sources))
	for _, src := range sources {
		if n, ok := s.limit[src]; ok {
			out[src] = n
		}
	}
	return out
}

// sourceLimits are the consumed topics' max.message.bytes read at start
// (sourceMaxBytes).
type sourceLimits struct {
	mu     sync.Mutex       // guards limit and warned, across the read
	limit  map[string]int32 // by source topic, those read
	warned bool             // a failure to read one was warned of
}

// wantParkedMaxBytes returns, by source topic, the max.message.bytes its
// parked topic needs: the source's plus parkHeadroom. A source whose limit
// cannot be read is missing (logged).
func (r *Receiver) wantParkedMaxBytes(ctx context.Context, adm *kadm.Client, sources []string) map[string]int32 {
	limits := r.sourceMaxBytes(ctx, adm, sources)
	want := make(map[string]int32, len(limits))
	for src, n := range limits {
		want[src] = int32(min(int64(n)+parkHeadroom, 1<<30))
	}
	return want
}

// sizeParkedTopics reads the parked topics' max.message.bytes, which the
// client's batches to them keep to from now on, and warns of one below
// what its source needs. created are those wowd just created, with the
// value it gave them: used where a topic cannot be read.
func (r *Receiver) sizeParkedTopics(ctx context.Context, adm *kadm.Client, sources []string, want, created map[string]int32) {
	parked := make([]string, 0, len(sources))
	for _, src := range sources {
		parked = append(parked, park.Topic(src))
	}
	limits, err := topicsize.MaxMessageBytesOfExisting(ctx, adm, parked...)
	var unread []string
	for _, t := range parked {
		if n, ok := created[t]; ok {
			if _, ok := limits[t]; !ok {
				limits[t] = n // just created: not readable yet everywhere
			}
		}
		if _, ok := limits[t]; !ok {
			unread = append(unread, t)
		}
	}
	if len(unread) > 0 {
		r.log.Warn("reading the parked topics' max.message.bytes (needs DescribeConfigs on them); writes to one not read keep to 1000012-byte batches, and a larger parked copy waits until it is read at a restart",
			zap.Strings("parked_topics", unread), zap.Error(err))
	}
	s := &parkSizes{limit: make(map[string]int32, len(limits)), want: want}
	for _, src := range sources {
		t := park.Topic(src)
		n, ok := limits[t]
		if !ok {
			continue
		}
		s.limit[t] = topicsize.BatchLimit(n)
		if w, ok := want[src]; ok && n < w {
			r.log.Warn("parked topic's max.message.bytes is below its source's plus room for the parking headers: a message near its source's limit that fails for good cannot be parked and holds its partition; raise it, then restart wowd",
				zap.String("parked_topic", t), zap.Int32("max_message_bytes", n), zap.Int32("want", w))
		}
	}
	r.park.sizes.Store(s)
}

// parkTooLarge logs and counts a parked copy refused as too large for its
// parked topic. The record is then retried with the capped backoff until
// an operator raises the limit, holding its partition's commit: dropping
// it would lose it, and committing past it would reorder its aggregate.
func (j *job) parkTooLarge(rec *kgo.Record, attempt int, wait time.Duration, err error) {
	r := j.r
	src := j.rec
	at := []zap.Field{zap.String("topic", src.Topic), zap.Int32("partition", src.Partition), zap.Int64("offset", src.Offset),
		zap.String("parked_topic", rec.Topic), zap.Int("record_bytes", topicsize.RecordBytes(rec))}
	want := int64(topicsize.RecordBytes(rec)) + parkHeadroom
	read := false
	if s := r.park.sizes.Load(); s != nil {
		if n, ok := s.limit[rec.Topic]; ok {
			at, read = append(at, zap.Int32("max_message_bytes", n)), true
		}
		if n, ok := s.want[src.Topic]; ok {
			want = max(want, int64(n))
		}
	}
	r.m.ParkAction("park", "failed")
	at = append(at, zap.Int64("max_message_bytes_wanted", want), zap.Int("attempt", attempt), zap.Duration("wait", wait), zap.Error(err))
	if !read {
		// Not read at start (the broker unreachable then, or no
		// DescribeConfigs: warned then): the client keeps its batches to
		// this topic at kgo's default, whatever the topic allows, until a
		// restart reads the limit.
		r.log.Error("parked copy too large for the parked topic, whose max.message.bytes wowd could not read at start (see the warning then): writes to it keep to 1000012-byte batches; make sure the parked topic's max.message.bytes is at least max_message_bytes_wanted and that wowd may read it (DescribeConfigs), then restart wowd; retrying, the source offset stays uncommitted",
			at...)
		return
	}
	r.log.Error("parked copy too large for the parked topic: raise the parked topic's max.message.bytes to at least max_message_bytes_wanted, then restart wowd (it reads the limit at start); retrying, the source offset stays uncommitted",
		at...)
}

// produceParkedDeadLetter writes the dead letter of the parked record rec
// (a skip's head, a discard's messages) durably, like produceDurably. One
// too large for the dead-letter topic is written as a stub, as the
// dead-letter path does (deadLetter): without its value and its source
// headers, with its parking headers, which say where it came from and why
// it parked; the parked topic keeps it whole (wowd creates it without
// retention).
func (r *Receiver) produceParkedDeadLetter(p *partition, rec *kgo.Record, at []zap.Field) error {
	dl := r.parkedDeadLetter(rec)
	err := r.produceDurablyUntil(p, topicsize.TooLarge, dl)
	if err == nil || !topicsize.TooLarge(err) {
		return err
	}
	at = append(at, zap.String("dead_letter_topic", dl.Topic), zap.ByteString("offset", headerValue(rec, park.HeaderSourceOffset)),
		zap.Int32("parked_partition", rec.Partition), zap.Int64("parked_offset", rec.Offset),
		zap.Int("value_bytes", len(rec.Value)), zap.Int("record_bytes", topicsize.RecordBytes(dl)))
	if n, ok := r.deadLetterLimit(dl.Topic); ok {
		at = append(at, zap.Int32("max_message_bytes", n))
	}
	r.log.Warn("parked aggregate: a parked message is too large for the dead-letter topic; writing its position and reason without its value and headers (the parked topic keeps it whole)",
		append(at, zap.Error(err))...)
	stub := &kgo.Record{Topic: dl.Topic, Key: dl.Key, Timestamp: dl.Timestamp}
	omitted := 0
	for _, h := range dl.Headers {
		if strings.HasPrefix(h.Key, park.HeaderPrefix) {
			stub.Headers = append(stub.Headers, h)
		} else {
			omitted++
		}
	}
	stub.Headers = append(stub.Headers,
		kgo.RecordHeader{Key: HeaderValueOmitted, Value: []byte(strconv.Itoa(len(dl.Value)))},
		kgo.RecordHeader{Key: HeaderHeadersOmitted, Value: []byte(strconv.Itoa(omitted))},
	)
	if err := r.produceDurably(p, stub); err != nil {
		return fmt.Errorf("writing the dead-letter stub of a parked message: %w", err)
	}
	return nil
}

// headerValue returns the value of rec's last header named key, or nil.
func headerValue(rec *kgo.Record, key string) []byte {
	var v []byte
	for _, h := range rec.Headers {
		if h.Key == key {
			v = h.Value
		}
	}
	return v
}
