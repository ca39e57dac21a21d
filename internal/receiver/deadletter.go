package receiver

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/wowd/wowd/internal/metrics"
	"github.com/wowd/wowd/internal/topicsize"
)

// Headers added to a dead-letter record, besides the source record's own.
const (
	HeaderSourceTopic     = "wowd-dlq-source-topic"
	HeaderSourcePartition = "wowd-dlq-source-partition"
	HeaderSourceOffset    = "wowd-dlq-source-offset"
	HeaderDispatcher      = "wowd-dlq-dispatcher"
	HeaderErrorClass      = "wowd-dlq-error-class"
	HeaderErrorMessage    = "wowd-dlq-error-message"
	HeaderAttempts        = "wowd-dlq-attempts"
)

// HeaderHandledBy and HeaderHandledDispatchers mark a record wowd published
// after handling it locally first (the ingest endpoint): the wow.service
// that handled it, and the comma-separated names of its dispatchers that
// finished it. A receiver of that service whose dispatcher is listed
// acknowledges the record without handling it again; the others handle it.
// A record marked by a version of wowd without the list is skipped by every
// receiver of the service.
const (
	HeaderHandledBy          = "wowd-handled-by"
	HeaderHandledDispatchers = "wowd-handled-dispatchers"
)

// maxErrorHeader bounds the error text carried in a dead-letter header.
const maxErrorHeader = 1024

// Headers of a dead letter whose record was too large for the dead-letter
// topic: the record's value and headers are left out, the source position
// says where to find them.
const (
	HeaderValueOmitted   = "wowd-dlq-value-omitted"   // the size in bytes of the value left out
	HeaderHeadersOmitted = "wowd-dlq-headers-omitted" // the number of the record's headers left out
)

// deadLetterAttempts bounds the writes of one dead letter that the broker
// or the client refuse. Retriable errors (a broker away, a leader moving)
// never reach the receiver: the client retries them itself. What does is
// refused for good unless someone acts (an ACL, a missing topic), so the
// receiver retries with backoff (13 to 25 s in all) and then gives up, loudly,
// rather than hold the partition forever.
const deadLetterAttempts = 8

// isDeadLetterHeader reports whether h is one of the wowd-dlq-* headers a
// dead letter is written with.
func isDeadLetterHeader(h kgo.RecordHeader) bool { return strings.HasPrefix(h.Key, "wowd-dlq-") }

// withoutDeadLetterHeaders returns hs less the wowd-dlq-* headers of an
// earlier failure (a replayed dead letter's): hs itself when it has none,
// else a copy.
func withoutDeadLetterHeaders(hs []kgo.RecordHeader) []kgo.RecordHeader {
	if !slices.ContainsFunc(hs, isDeadLetterHeader) {
		return hs
	}
	return slices.DeleteFunc(slices.Clone(hs), isDeadLetterHeader)
}

// deadLetterHeadroom is what a dead-letter topic wowd creates has above its
// source's max.message.bytes: the wowd-dlq-* headers (an error message of
// up to maxErrorHeader bytes, the source topic of up to 249, the
// dispatcher's name, four short values and the keys), or, for a parked
// message skipped or discarded, the wowd-parked-* headers, take under
// 2 KiB with names of a sane length: parkHeadroom's 64 KiB.
const deadLetterHeadroom = parkHeadroom

// deadLetter writes j's record to the dead-letter topic and finishes it once
// the broker acknowledged the write; the source offset is never committed
// before that. A record too large for the topic is written without its
// value and headers (flagged in HeaderValueOmitted). A write refused
// deadLetterAttempts times is given up: logged as an error with the record's
// position, counted as dead_letter_failed, and committed past.
//
// Only records fetched from Kafka are dead-lettered, so only after Start
// has read the dead-letter topics' max.message.bytes (kgo asks for a
// partition's batch limit once, at the first write to it): the poll loop
// starts after that. A local (ingest) record has no position in Kafka yet,
// and its copy, published as handled here, would be skipped: it is given
// up instead, and its copy goes to the owner of its partition, which
// dead-letters it at its position, in its aggregate's order.
func (r *Receiver) deadLetter(j *job) {
	if j.p == r.local {
		r.log.Warn("local record failed for good; given up here, its copy in Kafka goes to the owner of its partition (and is dead-lettered there)",
			zap.String("topic", j.rec.Topic), zap.String("aggregate", j.msg.AggregateID), zap.String("class", j.failure.class),
			zap.String("reason", j.failure.reason))
		j.abandon()
		return
	}
	r.writeDeadLetter(j)
}

// writeDeadLetter makes one write of j's dead letter.
func (r *Receiver) writeDeadLetter(j *job) {
	reason := truncate(j.failure.reason, maxErrorHeader)
	src := j.rec
	// A replayed dead letter that failed again keeps its own headers but
	// not its earlier failure's: one set of wowd-dlq-* headers, this one's.
	own := withoutDeadLetterHeaders(src.Headers)
	hs := make([]kgo.RecordHeader, 0, len(own)+9)
	value := src.Value
	if j.failure.stub {
		value = nil
		hs = append(hs,
			kgo.RecordHeader{Key: HeaderValueOmitted, Value: []byte(strconv.Itoa(len(src.Value)))},
			kgo.RecordHeader{Key: HeaderHeadersOmitted, Value: []byte(strconv.Itoa(len(own)))},
		)
	} else {
		hs = append(hs, own...)
	}
	hs = append(hs,
		kgo.RecordHeader{Key: HeaderSourceTopic, Value: []byte(src.Topic)},
		kgo.RecordHeader{Key: HeaderSourcePartition, Value: []byte(strconv.Itoa(int(src.Partition)))},
		kgo.RecordHeader{Key: HeaderSourceOffset, Value: []byte(strconv.FormatInt(src.Offset, 10))},
		kgo.RecordHeader{Key: HeaderDispatcher, Value: []byte(r.o.Dispatcher)},
		kgo.RecordHeader{Key: HeaderErrorClass, Value: []byte(j.failure.class)},
		kgo.RecordHeader{Key: HeaderErrorMessage, Value: []byte(reason)},
		kgo.RecordHeader{Key: HeaderAttempts, Value: []byte(strconv.Itoa(j.failure.attempts))},
	)
	rec := &kgo.Record{
		Topic:     r.o.DeadLetter.Topic(src.Topic),
		Key:       src.Key,
		Value:     value,
		Headers:   hs,
		Timestamp: src.Timestamp,
	}
	// TryProduce, not Produce: Produce waits for room in the client's
	// buffer (MaxBufferedRecords), and this runs on the goroutine that
	// concluded the record: the poll loop (an unroutable record), an
	// executor worker, the handler's, the deadline watcher. A wait there
	// would hold them all, and a Stop behind the poll loop.
	r.cl.TryProduce(j.p.ctx, rec, func(_ *kgo.Record, err error) {
		at := []zap.Field{zap.String("topic", src.Topic), zap.Int32("partition", src.Partition),
			zap.Int64("offset", src.Offset), zap.String("dead_letter_topic", rec.Topic)}
		switch {
		case errors.Is(err, kgo.ErrMaxBuffered):
			// The client's buffer is full (other dead letters, parked
			// copies): write again once it may have room, without counting
			// an attempt. Called from within TryProduce: nothing waits.
			j.after(r.holdBackoff(1), func() { r.writeDeadLetter(j) })
		case err == nil:
			r.log.Warn("record dead-lettered", append(at, zap.String("class", j.failure.class), zap.String("reason", reason),
				zap.Bool("value_omitted", j.failure.stub))...)
			if j.failure.screened {
				j.finish(metrics.Unroutable) // no handler failed: dead-lettered as it came
			} else {
				j.finish(metrics.DeadLettered)
			}
		case j.p.ctx.Err() != nil:
			j.abandon()
		case !j.failure.stub && topicsize.TooLarge(err):
			// The record plus the provenance headers does not fit: write
			// where it is and why, without its value and headers.
			at = append(at, zap.Int("value_bytes", len(src.Value)), zap.Int("record_bytes", topicsize.RecordBytes(rec)))
			if n, ok := r.deadLetterLimit(rec.Topic); ok {
				at = append(at, zap.Int32("max_message_bytes", n))
			}
			r.log.Warn("record too large for the dead-letter topic; writing its position and reason without its value and headers (its source topic keeps it whole; to dead-letter such records whole, raise the dead-letter topic's max.message.bytes above record_bytes, then restart wowd)",
				append(at, zap.Error(err))...)
			j.failure.stub = true
			// Not from inside this promise: Produce may block for room in
			// the client's buffer, which this record fills until its
			// promise returns. The goroutine ends once the write is
			// buffered, or with the partition's context or the client.
			go r.writeDeadLetter(j)
		case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
			// The client fails the records buffered for a partition of
			// the dead-letter topic with the context of the first of
			// them: another source partition's, closed meanwhile (its
			// own is open: the case above). Not a refusal: write again,
			// without counting an attempt.
			r.log.Info("dead-letter write ended by another partition's write; writing again", at...)
			j.after(r.holdBackoff(1), func() { r.writeDeadLetter(j) })
		default:
			j.tries++
			if j.tries >= deadLetterAttempts {
				r.log.Error("dead-letter write refused; giving up on the record and committing past it: it stays in its source topic at this position",
					append(at, zap.Int("attempts", j.tries), zap.String("class", j.failure.class), zap.String("reason", reason),
						zap.NamedError("write_error", err))...)
				j.finish(metrics.DeadLetterFailed)
				return
			}
			wait := r.holdBackoff(j.tries)
			r.log.Error("dead-letter write failed; retrying, the source offset stays uncommitted",
				append(at, zap.Int("attempt", j.tries), zap.Int("of", deadLetterAttempts), zap.Duration("wait", wait), zap.Error(err))...)
			missing := errors.Is(err, kerr.UnknownTopicOrPartition)
			j.after(wait, func() {
				if missing {
					// Its source did not exist at Start, so no
					// dead-letter topic was made for it: make it now.
					r.ensureDeadLetterTopicsLate(j.p.ctx)
				}
				r.writeDeadLetter(j)
			})
		}
	})
}

// ensureDeadLetterTopics creates the missing dead-letter topics of the
// receiver's topics, each with its source's partition count, the broker's
// default replication, and a max.message.bytes of its source's plus
// deadLetterHeadroom (read with DescribeConfigs), so that a record that
// fits its source is dead-lettered whole. A dead-letter topic of several
// sources gets the largest of theirs; one of a source whose limit cannot
// be read (warned of), or whose limit the cluster refuses (a managed
// cluster's cap: warned of), gets the cluster's default. Failing to create
// it (no permission, broker down) it only warns: a dead-letter write to a
// missing topic is retried and holds the source offset, so nothing is lost.
// Then it reads the dead-letter topics' limits (sizeDeadLetterTopics).
//
// Unlike a parked topic, a dead-letter topic gets no 8 MiB floor for
// records their producer compressed to fit their source (the client checks
// its batch limit before compressing): such a dead letter is written as a
// stub, its record kept whole in its source topic, where a parked copy
// refused would hold its partition.
func (r *Receiver) ensureDeadLetterTopics(ctx context.Context) {
	adm := kadm.NewClient(r.cl)
	sources, err := adm.ListTopics(ctx, r.topics...)
	if err != nil {
		r.log.Warn("listing topics to create dead-letter topics; writes to the dead-letter topics keep to 1000012-byte batches, and a larger dead letter is written without its value and headers", zap.Error(err))
		return
	}
	var present []string
	for _, src := range r.topics {
		if st, ok := sources[src]; ok && st.Err == nil {
			present = append(present, src)
		}
		// else the source does not exist yet; its dead-letter topic can wait
	}
	limits := r.sourceMaxBytes(ctx, adm, present)
	type dlTopic struct {
		partitions int32 // its first source's
		want       int32 // the largest of its sources' limits plus deadLetterHeadroom
		unknown    bool  // a source's limit not read: the cluster's default, as before
	}
	var dls []string
	byTopic := make(map[string]*dlTopic)
	for _, src := range present {
		dl := r.o.DeadLetter.Topic(src)
		t := byTopic[dl]
		if t == nil {
			t = &dlTopic{partitions: int32(len(sources[src].Partitions))}
			byTopic[dl] = t
			dls = append(dls, dl)
		}
		if n, ok := limits[src]; ok {
			t.want = max(t.want, int32(min(int64(n)+deadLetterHeadroom, 1<<30)))
		} else {
			t.unknown = true
		}
	}
	created := make(map[string]int32)
	want := make(map[string]int32, len(dls))
	for _, dl := range dls {
		if t := byTopic[dl]; !t.unknown {
			want[dl] = t.want
		}
	}
	for _, dl := range dls {
		t := byTopic[dl]
		var configs map[string]*string
		if !t.unknown {
			v := strconv.Itoa(int(t.want))
			configs = map[string]*string{"max.message.bytes": &v}
		}
		for {
			resp, err := adm.CreateTopic(ctx, t.partitions, -1, configs, dl)
			err = errors.Join(err, resp.Err)
			switch {
			case err == nil:
				r.log.Info("dead-letter topic created", zap.String("topic", dl), zap.Int32("partitions", t.partitions))
				if configs != nil {
					created[dl] = t.want
				}
			case errors.Is(err, kerr.TopicAlreadyExists):
			case configs != nil && (errors.Is(err, kerr.InvalidConfig) || errors.Is(err, kerr.PolicyViolation)):
				// A cluster that caps max.message.bytes (a managed one):
				// its default then.
				r.log.Warn("creating dead-letter topic: its max.message.bytes refused; creating it with the cluster's default",
					zap.String("topic", dl), zap.Int32("max_message_bytes", t.want), zap.Error(err))
				configs = nil
				continue
			default:
				r.log.Warn("creating dead-letter topic; writes to it will be retried until it exists",
					zap.String("topic", dl), zap.Error(err))
			}
			break
		}
	}
	r.sizeDeadLetterTopics(ctx, adm, dls, want, created)
}

// ensureDeadLetterTopicsLate runs ensureDeadLetterTopics again, for a
// dead-letter write refused because its topic does not exist: its source
// topic appeared after Start. One at a time, at most once per
// deadLetterRecheck (the writes that wait meanwhile retry after it), and
// within startTimeout or until ctx (the writing job's partition) ends.
func (r *Receiver) ensureDeadLetterTopicsLate(ctx context.Context) {
	r.dlEnsureMu.Lock()
	defer r.dlEnsureMu.Unlock()
	if !r.dlEnsuredAt.IsZero() && time.Since(r.dlEnsuredAt) < deadLetterRecheck {
		return
	}
	r.dlEnsuredAt = time.Now()
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	r.ensureDeadLetterTopics(ctx)
}

// deadLetterRecheck is how often a dead-letter write to a missing topic
// may make the receiver look for new sources again.
const deadLetterRecheck = 5 * time.Second

// sizeDeadLetterTopics reads the dead-letter topics' max.message.bytes,
// which the client's batches to them keep to from now on (batchMaxBytes):
// a dead letter the topic allows is written whole, and small ones batched
// together are never refused for their sum. created are those wowd just
// created, with the value it gave them: used where a topic cannot be read.
// Where none can be, the client keeps to kgo's default batches, as before:
// a larger dead letter is written as a stub (warned of once, here). want
// is what each needs to take its sources' largest record whole (their
// limit plus deadLetterHeadroom, where read): one below it is warned of
// once, here, since its failed records near that size become stubs.
func (r *Receiver) sizeDeadLetterTopics(ctx context.Context, adm *kadm.Client, dls []string, want, created map[string]int32) {
	if len(dls) == 0 {
		return
	}
	limits, err := topicsize.MaxMessageBytesOfExisting(ctx, adm, dls...)
	var unread []string
	sizes := make(map[string]int32, len(dls))
	for _, t := range dls {
		n, ok := limits[t]
		if !ok {
			n, ok = created[t] // just created: not readable yet everywhere
		}
		if !ok {
			unread = append(unread, t)
			continue
		}
		sizes[t] = topicsize.BatchLimit(n)
		if w, ok := want[t]; ok && n < w {
			r.log.Warn("dead-letter topic's max.message.bytes is below its sources' plus room for the dead-letter headers: a message near its source's limit that fails for good is dead-lettered without its value and headers (its source topic keeps it whole); to keep such messages whole, raise it to at least want, then restart wowd",
				zap.String("dead_letter_topic", t), zap.Int32("max_message_bytes", n), zap.Int32("want", w))
		}
	}
	if len(unread) > 0 {
		r.log.Warn("reading the dead-letter topics' max.message.bytes (needs DescribeConfigs on them); writes to one not read keep to 1000012-byte batches, and a larger dead letter is written without its value and headers",
			zap.Strings("dead_letter_topics", unread), zap.Error(err))
	}
	r.dlSizes.Store(&sizes)
}

// deadLetterLimit returns the batch limit the client keeps to for the
// dead-letter topic t, as read at start, and false where it was not read
// (kgo's default of 1000012 bytes then).
func (r *Receiver) deadLetterLimit(t string) (int32, bool) {
	if s := r.dlSizes.Load(); s != nil {
		n, ok := (*s)[t]
		return n, ok
	}
	return 0, false
}
