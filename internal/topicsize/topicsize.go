// Package topicsize knows how large a record a Kafka topic takes: a
// topic's max.message.bytes (read with DescribeConfigs), a record's size in
// a batch, and the limit franz-go keeps a topic's batches to.
//
// franz-go asks a client's ProducerBatchMaxBytesFn once per topic, when the
// first produce to the topic loads its partitions, and keeps that limit for
// the client's life: whoever sizes a topic's batches from its
// max.message.bytes must read it before writing to the topic.
package topicsize

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// DefaultBatchMax is franz-go's default ProducerBatchMaxBytes (a little
// under Kafka's default max.message.bytes, 1,048,588): what a client keeps
// its batches to for a topic whose limit it did not read.
const DefaultBatchMax = 1_000_012

// MaxMessageBytes reads the max.message.bytes of topics (their effective
// value: the topic's own, else the broker's default). A topic whose value
// cannot be read is missing from the result, with the error.
func MaxMessageBytes(ctx context.Context, adm *kadm.Client, topics ...string) (map[string]int32, error) {
	out := make(map[string]int32, len(topics))
	rcs, err := adm.DescribeTopicConfigs(ctx, topics...)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, rc := range rcs {
		if rc.Err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", rc.Name, rc.Err))
			continue
		}
		for _, c := range rc.Configs {
			if c.Key != "max.message.bytes" {
				continue
			}
			n, err := strconv.ParseInt(c.MaybeValue(), 10, 32)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: max.message.bytes %q: %w", rc.Name, c.MaybeValue(), err))
				break
			}
			out[rc.Name] = int32(n)
		}
	}
	return out, errors.Join(errs...)
}

// MaxMessageBytesOfExisting is MaxMessageBytes for topics known to exist,
// just created or reported as existing by a create: a broker whose metadata
// lags its controller answers for such a topic that it does not know it
// (UNKNOWN_TOPIC_OR_PARTITION) for a moment. Those are asked again, up to
// existingRetries times with a doubling wait from 50 ms (about 1.5 s in
// all), and no later than ctx.
func MaxMessageBytesOfExisting(ctx context.Context, adm *kadm.Client, topics ...string) (map[string]int32, error) {
	out, err := MaxMessageBytes(ctx, adm, topics...)
	wait := 50 * time.Millisecond
	for range existingRetries {
		if !errors.Is(err, kerr.UnknownTopicOrPartition) {
			break
		}
		var again []string
		for _, t := range topics {
			if _, ok := out[t]; !ok {
				again = append(again, t)
			}
		}
		select {
		case <-ctx.Done():
			return out, err
		case <-time.After(wait):
		}
		wait *= 2
		var more map[string]int32
		more, err = MaxMessageBytes(ctx, adm, again...)
		maps.Copy(out, more)
	}
	return out, err
}

// existingRetries bounds MaxMessageBytesOfExisting's second asks.
const existingRetries = 5

// BatchLimit is a topic's max.message.bytes as a batch limit of the
// client, which takes [512, 1 GiB].
func BatchLimit(n int32) int32 { return min(max(n, 512), 1<<30) }

// RecordBytes is what rec takes in a record batch of its own, at least as
// much as the client counts against the topic's batch limit (a record over
// it is refused, TooLarge, before it is sent): the batch's 65 bytes of
// header, up to 5 of its length prefix, the record's framing of up to 23
// bytes (with a first record's one-byte deltas), 10 per header.
func RecordBytes(rec *kgo.Record) int {
	n := 100 + len(rec.Key) + len(rec.Value)
	for _, h := range rec.Headers {
		n += 10 + len(h.Key) + len(h.Value)
	}
	return n
}

// TooLarge reports whether a write was refused for its size, by the broker
// (the topic's max.message.bytes) or by the client (larger than its batch
// limit for the topic): franz-go reports both as kerr.MessageTooLarge.
func TooLarge(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)
}
