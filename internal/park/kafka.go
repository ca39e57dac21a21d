package park

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Ends returns the end offset of each partition of topic. A topic that does
// not exist is an error, unless missingOK: then it has none. (A receiver
// must not take a topic it cannot see for an empty one: the broker may
// only not know it yet.)
func Ends(ctx context.Context, adm *kadm.Client, topic string, missingOK bool) (map[int32]int64, error) {
	listed, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("listing the end offsets of %s: %w", topic, err)
	}
	ends := make(map[int32]int64)
	if _, ok := listed[topic]; !ok && !missingOK {
		return nil, fmt.Errorf("listing the end offsets of %s: %w", topic, kerr.UnknownTopicOrPartition)
	}
	for _, o := range listed[topic] {
		switch {
		case errors.Is(o.Err, kerr.UnknownTopicOrPartition) && missingOK:
			return map[int32]int64{}, nil
		case o.Err != nil:
			return nil, fmt.Errorf("listing the end offset of %s/%d: %w", topic, o.Partition, o.Err)
		}
		ends[o.Partition] = o.Offset
	}
	return ends, nil
}

// stateEnds is Ends for a state topic, which must have one partition: its
// readers rely on the order of its records (an owner's adopted states
// before its owner record, an aggregate's requests and their deletes), and
// Kafka orders records only within a partition. wowd creates it with one;
// one created by hand with more is refused rather than read out of order.
func stateEnds(ctx context.Context, adm *kadm.Client, topic string, missingOK bool) (map[int32]int64, error) {
	ends, err := Ends(ctx, adm, topic, missingOK)
	if err == nil && len(ends) > 1 {
		return nil, fmt.Errorf("parking state topic %s has %d partitions: it must have exactly one (its readers rely on the order of its records); recreate it with one", topic, len(ends))
	}
	return ends, err
}

// Read calls fn with the records of topic from the offsets of from up to
// (not including) the offsets of to, in offset order per partition, with a
// client of its own made from opts (brokers, TLS, SASL). Partitions missing
// from from are read from their start. It stops at the first error of fn.
func Read(ctx context.Context, opts []kgo.Opt, topic string, from, to map[int32]int64, fn func(*kgo.Record) error) error {
	start := make(map[int32]kgo.Offset)
	left := make(map[int32]int64)
	for p, end := range to {
		o, ok := from[p]
		if !ok {
			o = 0
		}
		if o >= end {
			continue
		}
		if ok {
			start[p] = kgo.NewOffset().At(o)
		} else {
			start[p] = kgo.NewOffset().AtStart()
		}
		left[p] = end
	}
	if len(left) == 0 {
		return nil
	}
	// No reset: a start below the log's (retention removed what was to
	// be read) is an error, never a silent jump.
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, opts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}), kgo.ConsumeResetOffset(kgo.NoResetOffset()))...)
	if err != nil {
		return fmt.Errorf("kafka client reading %s: %w", topic, err)
	}
	defer cl.Close()
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("reading %s: %w", topic, err)
		}
		var ferr error
		fs.EachError(func(_ string, p int32, err error) {
			ferr = errors.Join(ferr, fmt.Errorf("reading %s/%d: %w", topic, p, err))
		})
		if ferr != nil {
			return ferr
		}
		var stop error
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := left[r.Partition]
			if stop != nil || !ok || r.Offset >= end {
				return
			}
			if err := fn(r); err != nil {
				stop = err
			}
			if r.Offset+1 >= end {
				delete(left, r.Partition)
			}
		})
		if stop != nil {
			return stop
		}
	}
	return nil
}

// ReadState returns the parked aggregates of a state topic by
// Key(topic, aggregate), as of now, with their pending requests.
func ReadState(ctx context.Context, opts []kgo.Opt, adm *kadm.Client, topic string) (map[string]*State, error) {
	book, err := ReadBook(ctx, opts, adm, topic)
	if book == nil {
		return nil, err
	}
	// A request is pending on its aggregate; one on an aggregate that is
	// not parked is stale, and not shown.
	states := book.All()
	for k, req := range book.AllRequests() {
		if s := states[k]; s != nil {
			withReq := *s
			withReq.Request = req.Request
			states[k] = &withReq
		}
	}
	return states, err
}

// ReadBook reads a state topic, as of now, into a Book. With an error, the
// Book holds what could be read, or is nil when nothing could.
func ReadBook(ctx context.Context, opts []kgo.Opt, adm *kadm.Client, topic string) (*Book, error) {
	ends, err := stateEnds(ctx, adm, topic, true)
	if err != nil {
		return nil, err
	}
	book := NewBook()
	var bad error
	err = Read(ctx, opts, topic, nil, ends, func(r *kgo.Record) error {
		var s *State
		if r.Value != nil {
			var err error
			if s, err = Unmarshal(r.Key, r.Value); err != nil {
				bad = errors.Join(bad, err)
				return nil
			}
		}
		bad = errors.Join(bad, book.Apply(string(r.Key), s))
		return nil
	})
	return book, errors.Join(err, bad)
}

// Parked returns the parked messages of s's aggregate, from its head on, in
// order, as they are in the parked topic (with the parking headers).
func Parked(ctx context.Context, opts []kgo.Opt, adm *kadm.Client, s *State) ([]*kgo.Record, error) {
	var out []*kgo.Record
	from := s.Head.Offset
	for {
		recs, next, err := ParkedFrom(ctx, opts, adm, s, from, 1024)
		if err != nil {
			return nil, err
		}
		out = append(out, recs...)
		if len(recs) == 0 {
			return out, nil
		}
		from = next
	}
}

// errEnough stops a Read that has what it wanted.
var errEnough = errors.New("enough")

// chunkBytes bounds the keys, values and headers of the messages one
// ParkedFrom returns, beyond its first: an action holds its chunk while it
// hands the messages over one at a time, up to four actions run at once,
// and a parked copy may be several MiB (its topic's max.message.bytes is
// its source's plus headroom, at least 8 MiB). 256 messages of 470 bytes
// are 120 KB; 256 of 8 MiB would be 2 GiB.
const chunkBytes = 4 << 20

// ParkedFrom returns up to limit parked messages of s's aggregate at or
// after offset from of its parked partition, in order, and the offset to
// read on from; no messages means none is left. Past chunkBytes it returns
// fewer, at least one.
func ParkedFrom(ctx context.Context, opts []kgo.Opt, adm *kadm.Client, s *State, from int64, limit int) ([]*kgo.Record, int64, error) {
	topic := Topic(s.Topic)
	ends, err := Ends(ctx, adm, topic, false)
	if err != nil {
		return nil, from, err
	}
	end, ok := ends[s.Head.Partition]
	if !ok {
		return nil, from, fmt.Errorf("parked topic %s has no partition %d", topic, s.Head.Partition)
	}
	var out []*kgo.Record
	next, size := from, 0
	err = Read(ctx, opts, topic, map[int32]int64{s.Head.Partition: from}, map[int32]int64{s.Head.Partition: end},
		func(r *kgo.Record) error {
			next = r.Offset + 1
			if s.Of(r) {
				out = append(out, owned(r))
				size += recordBytes(r)
				if len(out) == limit || size >= chunkBytes {
					return errEnough
				}
			}
			return nil
		})
	if errors.Is(err, errEnough) {
		err = nil
	}
	return out, next, err
}

// owned returns a copy of r that shares no memory with its fetched batch:
// r's key, value and headers point into the decompressed batch (and r into
// the batch's records), so a chunk of small messages kept as they come
// would keep whole batches alive, other aggregates' large messages with
// them, and chunkBytes would bound nothing. The key, value and headers go
// into one allocation, key first and the value right after it, as the
// receiver copies fetched records.
func owned(r *kgo.Record) *kgo.Record {
	c := *r
	c.Context = nil
	b := make([]byte, 0, recordBytes(r))
	clone := func(v []byte) []byte {
		if v == nil {
			return nil
		}
		start := len(b)
		b = append(b, v...)
		return b[start:len(b):len(b)]
	}
	c.Key, c.Value = clone(r.Key), clone(r.Value)
	c.Headers = nil
	if len(r.Headers) > 0 {
		c.Headers = make([]kgo.RecordHeader, len(r.Headers))
		for i, h := range r.Headers {
			c.Headers[i] = kgo.RecordHeader{Key: strings.Clone(h.Key), Value: clone(h.Value)}
		}
	}
	return &c
}

// recordBytes is about what r holds in memory: its key, value and headers.
func recordBytes(r *kgo.Record) int {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// Of reports whether a record of the parked topic is a parked message of
// s's aggregate (its service and dispatcher: the parked topic is shared).
func (s *State) Of(r *kgo.Record) bool {
	return string(r.Key) == s.Aggregate && header(r, HeaderDispatcher) == s.Dispatcher && header(r, HeaderService) == s.Service
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// Source returns a parked record as the record it was parked from: its
// source topic, partition and offset, without the parking headers.
func Source(r *kgo.Record) (*kgo.Record, error) {
	src := *r
	src.Headers = nil
	var topic, part, off string
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderSourceTopic:
			topic = string(h.Value)
		case HeaderSourcePartition:
			part = string(h.Value)
		case HeaderSourceOffset:
			off = string(h.Value)
		}
		if len(h.Key) < len(HeaderPrefix) || h.Key[:len(HeaderPrefix)] != HeaderPrefix {
			src.Headers = append(src.Headers, h)
		}
	}
	if topic == "" {
		return nil, fmt.Errorf("parked record %s/%d@%d has no %s header", r.Topic, r.Partition, r.Offset, HeaderSourceTopic)
	}
	src.Topic = topic
	if _, err := fmt.Sscan(part, &src.Partition); err != nil {
		return nil, fmt.Errorf("parked record %s/%d@%d: %s %q: %w", r.Topic, r.Partition, r.Offset, HeaderSourcePartition, part, err)
	}
	if _, err := fmt.Sscan(off, &src.Offset); err != nil {
		return nil, fmt.Errorf("parked record %s/%d@%d: %s %q: %w", r.Topic, r.Partition, r.Offset, HeaderSourceOffset, off, err)
	}
	return &src, nil
}

// Tail follows a state topic from its start for as long as it runs, giving
// every record to a function, so that a receiver knows the parked
// aggregates of the partitions it is assigned and sees operators' requests.
type Tail struct {
	cl    *kgo.Client
	adm   *kadm.Client
	topic string
	fn    func(key string, s *State) // s nil: unparked (a tombstone)
	bad   func(error)                // a record that does not decode

	mu      sync.Mutex      // guards pos and changed
	pos     map[int32]int64 // next offset to read, per partition
	changed chan struct{}   // closed and replaced when pos moves
}

// NewTail returns a tail of topic. fn is called from Run's goroutine, in
// order per partition; bad with records it cannot decode.
func NewTail(opts []kgo.Opt, topic string, fn func(key string, s *State), bad func(error)) (*Tail, error) {
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, opts...),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		return nil, fmt.Errorf("kafka client following %s: %w", topic, err)
	}
	return &Tail{cl: cl, adm: kadm.NewClient(cl), topic: topic, fn: fn, bad: bad, pos: make(map[int32]int64), changed: make(chan struct{})}, nil
}

// Close closes the tail's client; for a tail that never ran.
func (t *Tail) Close() { t.cl.Close() }

// Run follows the topic until ctx is done, then closes the client.
func (t *Tail) Run(ctx context.Context) {
	defer t.cl.Close()
	for {
		fs := t.cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		fs.EachError(func(_ string, p int32, err error) {
			t.bad(fmt.Errorf("reading %s/%d: %w", t.topic, p, err))
		})
		moved := make(map[int32]int64)
		fs.EachRecord(func(r *kgo.Record) {
			if r.Value == nil {
				t.fn(string(r.Key), nil)
			} else if s, err := Unmarshal(r.Key, r.Value); err != nil {
				t.bad(err)
			} else {
				t.fn(string(r.Key), s)
			}
			moved[r.Partition] = r.Offset + 1
		})
		if len(moved) > 0 {
			t.mu.Lock()
			maps.Copy(t.pos, moved)
			close(t.changed)
			t.changed = make(chan struct{})
			t.mu.Unlock()
		}
	}
}

// CaughtUp returns once the tail has given fn every record the topic held
// when it was called, or ctx's error.
func (t *Tail) CaughtUp(ctx context.Context) error {
	ends, err := stateEnds(ctx, t.adm, t.topic, false)
	if err != nil {
		return err
	}
	// A partition whose records all expired has nothing to read to its end.
	starts, err := t.adm.ListStartOffsets(ctx, t.topic)
	if err != nil {
		return fmt.Errorf("listing the start offsets of %s: %w", t.topic, err)
	}
	starts.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Offset >= ends[o.Partition] {
			delete(ends, o.Partition)
		}
	})
	for {
		t.mu.Lock()
		behind := false
		for p, end := range ends {
			behind = behind || t.pos[p] < end
		}
		changed := t.changed
		t.mu.Unlock()
		if !behind {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("reading %s to its end: %w", t.topic, ctx.Err())
		case <-changed:
		}
	}
}

// Ask writes s back to the state topic with a request for action, made by
// by; the receiver that owns the aggregate's partition acts on it (now, or
// once one is assigned the partition).
func Ask(ctx context.Context, cl *kgo.Client, stateTopic string, s *State, action, by string) error {
	switch action {
	case Redrive, Skip, Discard, Park:
	default:
		return fmt.Errorf("unknown action %q (want %s, %s, %s or %s)", action, Redrive, Skip, Discard, Park)
	}
	asked := *s
	asked.Request = &Request{Action: action, By: by, At: time.Now().UTC(), ID: strconv.FormatInt(time.Now().UnixNano(), 36)}
	rec := &kgo.Record{Topic: stateTopic, Key: []byte(RequestKey(s.Topic, s.Aggregate, asked.Request.ID)), Value: asked.Marshal()}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("asking for %s of %s: %w", action, asked.Key(), err)
	}
	return nil
}
