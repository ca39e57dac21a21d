package receiver

import (
	"context"
	"errors"
	"strconv"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/wowd/wowd/internal/metrics"
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
// receiver retries with backoff for about a minute and then gives up, loudly,
// rather than hold the partition forever.
const deadLetterAttempts = 8

// deadLetter writes j's record to the dead-letter topic and finishes it once
// the broker acknowledged the write; the source offset is never committed
// before that. A record too large for the topic is written without its
// value and headers (flagged in HeaderValueOmitted). A write refused
// deadLetterAttempts times is given up: logged as an error with the record's
// position, counted as dead_letter_failed, and committed past.
func (r *Receiver) deadLetter(j *job) {
	reason := truncate(j.failure.reason, maxErrorHeader)
	src := j.rec
	hs := make([]kgo.RecordHeader, 0, len(src.Headers)+9)
	value := src.Value
	if j.failure.stub {
		value = nil
		hs = append(hs,
			kgo.RecordHeader{Key: HeaderValueOmitted, Value: []byte(strconv.Itoa(len(src.Value)))},
			kgo.RecordHeader{Key: HeaderHeadersOmitted, Value: []byte(strconv.Itoa(len(src.Headers)))},
		)
	} else {
		hs = append(hs, src.Headers...)
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
	r.cl.Produce(j.p.ctx, rec, func(_ *kgo.Record, err error) {
		at := []zap.Field{zap.String("topic", src.Topic), zap.Int32("partition", src.Partition),
			zap.Int64("offset", src.Offset), zap.String("dead_letter_topic", rec.Topic)}
		switch {
		case err == nil:
			r.log.Warn("record dead-lettered", append(at, zap.String("class", j.failure.class), zap.String("reason", reason),
				zap.Bool("value_omitted", j.failure.stub))...)
			j.finish(metrics.DeadLettered)
		case j.p.ctx.Err() != nil:
			j.abandon()
		case !j.failure.stub && tooLarge(err):
			// The record plus the provenance headers does not fit: write
			// where it is and why, without its value and headers.
			r.log.Warn("record too large for the dead-letter topic; writing its position and reason without its value and headers",
				append(at, zap.Int("value_bytes", len(src.Value)), zap.Error(err))...)
			j.failure.stub = true
			r.deadLetter(j)
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
			j.after(wait, func() { r.deadLetter(j) })
		}
	})
}

// ensureDeadLetterTopics creates the missing dead-letter topics of the
// receiver's topics, each with its source's partition count and the broker's
// default replication. Failing that (no permission, broker down) it only
// warns: a dead-letter write to a missing topic is retried and holds the
// source offset, so nothing is lost.
func (r *Receiver) ensureDeadLetterTopics(ctx context.Context) {
	adm := kadm.NewClient(r.cl)
	sources, err := adm.ListTopics(ctx, r.topics...)
	if err != nil {
		r.log.Warn("listing topics to create dead-letter topics", zap.Error(err))
		return
	}
	for _, src := range r.topics {
		dl := r.o.DeadLetter.Topic(src)
		st, ok := sources[src]
		if !ok || st.Err != nil {
			continue // the source does not exist yet; its dead-letter topic can wait
		}
		resp, err := adm.CreateTopic(ctx, int32(len(st.Partitions)), -1, nil, dl)
		switch {
		case err == nil && resp.Err == nil:
			r.log.Info("dead-letter topic created", zap.String("topic", dl), zap.Int("partitions", len(st.Partitions)))
		case errors.Is(err, kerr.TopicAlreadyExists) || errors.Is(resp.Err, kerr.TopicAlreadyExists):
		default:
			r.log.Warn("creating dead-letter topic; writes to it will be retried until it exists",
				zap.String("topic", dl), zap.Error(errors.Join(err, resp.Err)))
		}
	}
}
