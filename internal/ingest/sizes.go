package ingest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"go.uber.org/zap"

	"github.com/wowd/wowd/internal/topicsize"
)

// Sizes knows how large a record the ingest may publish to each topic: the
// topic's max.message.bytes, read once, before the first publish to the
// topic. Its BatchMax is the producer client's ProducerBatchMaxBytesFn, so
// that the client's batches to a topic keep to the topic's limit (a
// message the topic allows is published, and small ones batched together
// are not refused for their sum): franz-go asks it once per topic, when the
// first publish loads the topic's partitions, and keeps the answer.
//
// A message that would not fit is refused before it is admitted anywhere
// (ServeHTTP): handled locally and then refused by Kafka, it would have
// run its handlers for a message never published.
type Sizes struct {
	// Read reads a topic's max.message.bytes (topicsize.MaxMessageBytes).
	Read func(ctx context.Context, topic string) (int32, error)
	Log  *zap.Logger

	mu     sync.Mutex // guards topics
	topics map[string]*topicSize
}

// topicSize is the batch limit of one topic, read once.
type topicSize struct {
	done  chan struct{} // closed once limit (or err) is set
	limit int32         // the client's batch limit for the topic
	read  bool          // limit is the topic's own; else the client's default
	err   error         // the read failed for now: the entry is gone, the next message reads again
}

// sizeReadTimeout bounds the read of one topic's limit.
const sizeReadTimeout = 10 * time.Second

// Limit returns the client's batch limit for topic, reading the topic's
// max.message.bytes first unless it was read (or given up on) before, and
// whether it is the topic's own. Concurrent first callers wait for one
// read. A read that fails for now (the topic does not exist yet, a
// timeout, a broker moving) returns an error: the caller admits and
// publishes nothing, so the client never sizes the topic before its limit
// is known, and the next message reads it again. A failure that lasts (no
// permission to describe the topic's configuration, a value that does not
// parse) keeps the topic at the client's default for the life of the
// process, warned of once.
func (s *Sizes) Limit(ctx context.Context, topic string) (limit int32, read bool, err error) {
	s.mu.Lock()
	if s.topics == nil {
		s.topics = make(map[string]*topicSize)
	}
	t, ok := s.topics[topic]
	if !ok {
		t = &topicSize{done: make(chan struct{})}
		s.topics[topic] = t
	}
	s.mu.Unlock()
	if ok {
		select {
		case <-t.done:
			return t.limit, t.read, t.err
		case <-ctx.Done():
			return 0, false, fmt.Errorf("waiting for the max.message.bytes of %s: %w", topic, context.Cause(ctx))
		}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sizeReadTimeout)
	n, err := s.Read(rctx, topic)
	cancel()
	switch {
	case err == nil:
		t.limit, t.read = topicsize.BatchLimit(n), true
	case lasting(err):
		t.limit = topicsize.DefaultBatchMax
		s.Log.Warn("reading a topic's max.message.bytes (needs DescribeConfigs on it); ingested messages published to it keep to 1000012-byte batches until wowd restarts, and a larger message is refused",
			zap.String("topic", topic), zap.Error(err))
	default:
		s.mu.Lock()
		delete(s.topics, topic)
		s.mu.Unlock()
		if errors.Is(err, kerr.UnknownTopicOrPartition) {
			t.err = fmt.Errorf("topic %s does not exist: %w", topic, err)
		} else {
			t.err = fmt.Errorf("reading the max.message.bytes of %s: %w", topic, err)
		}
	}
	close(t.done)
	return t.limit, t.read, t.err
}

// ErrNoLimit is what Read returns for a topic whose configuration, read,
// holds no max.message.bytes: that lasts.
var ErrNoLimit = errors.New("no max.message.bytes in its configuration")

// lasting reports whether a failure to read a topic's limit will last until
// a restart: no permission (or another error the broker says retrying does
// not help), no limit in the topic's configuration, or a value that does
// not parse. The topic missing, a timeout or a broker moving pass.
func lasting(err error) bool {
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return false
	}
	if errors.Is(err, ErrNoLimit) {
		return true
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return !ke.Retriable
	}
	var ne *strconv.NumError
	return errors.As(err, &ne)
}

// BatchMax is the ingest client's ProducerBatchMaxBytesFn: a topic's limit
// once read, else the client's default.
func (s *Sizes) BatchMax(topic string) int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.topics[topic]; ok {
		select {
		case <-t.done:
			return t.limit
		default:
		}
	}
	return topicsize.DefaultBatchMax
}
