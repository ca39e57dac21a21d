package realkafka

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/internal/kafkatest"
	"github.com/wowd/wowd/internal/proctest"
)

func TestMain(m *testing.M) {
	code := kafkatest.Main(m)
	wowd.Remove()
	os.Exit(code)
}

// wowd is cmd/wowd, built on first use.
var wowd = &proctest.Binary{Pkg: "./cmd/wowd"}

// wowdBinary builds cmd/wowd once per test process and returns its path.
func wowdBinary(t *testing.T) string {
	t.Helper()
	return wowd.Path(t)
}

// env is what one test needs: the broker, an admin client, unique names.
type env struct {
	t       *testing.T
	brokers string
	seeds   []string
	adm     *kadm.Client
	admCl   *kgo.Client
	id      string // unique per test: prefixes topics and names the service
	rng     *rand.Rand
	ctx     context.Context // ends with the test's deadline (or 20 min)
}

func newEnv(t *testing.T, short string) *env {
	t.Helper()
	brokers := kafkatest.Brokers(t) // skips without a broker
	e := &env{
		t:       t,
		brokers: brokers,
		seeds:   kafkatest.SeedBrokers(t),
		id:      fmt.Sprintf("rk%s-%d", short, time.Now().UnixNano()%1e9),
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("random seed %d", seed)
	e.rng = rand.New(rand.NewPCG(seed, seed>>7))
	deadline, ok := t.Deadline()
	if !ok {
		deadline = time.Now().Add(20 * time.Minute)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(-30*time.Second))
	t.Cleanup(cancel)
	e.ctx = ctx
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds...), kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	e.admCl = cl
	e.adm = kadm.NewClient(cl)
	wowdBinary(t)
	return e
}

// prefix is the test's topic prefix: topics are <prefix><alias>.<aggregate>.<kind>.
func (e *env) prefix() string { return e.id + "." }

// topic names the topic of an aggregate's events in context alias.
func (e *env) topic(alias, aggregate string) string {
	return e.prefix() + alias + "." + aggregate + ".event"
}

// group is the consumer group of dispatcher "sink" for context alias.
func (e *env) group(alias string) string { return e.id + ".sink." + alias }

func (e *env) createTopic(name string, partitions int32) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	res, err := e.adm.CreateTopic(ctx, partitions, 1, nil, name)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		e.t.Fatalf("create topic %s: %v", name, err)
	}
	e.deleteAtEnd(name)
	// Wait until the topic's metadata shows every partition with a leader.
	for {
		md, err := e.adm.Metadata(ctx, name)
		if err == nil {
			if td, ok := md.Topics[name]; ok && td.Err == nil && len(td.Partitions) == int(partitions) {
				ok := true
				for _, p := range td.Partitions {
					if p.Leader < 0 || p.Err != nil {
						ok = false
					}
				}
				if ok {
					return
				}
			}
		}
		if ctx.Err() != nil {
			e.t.Fatalf("topic %s: partitions without a leader after a minute (%v)", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// deleteAtEnd deletes the topic when the test ends, after its wowd
// processes are gone (cleanups run last-registered first: call it before
// newCluster), so that a shared broker (WOWD_KAFKA_BROKERS) does not fill up.
func (e *env) deleteAtEnd(name string) {
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := e.adm.DeleteTopic(ctx, name); err != nil {
			e.t.Logf("delete topic %s: %v", name, err)
		}
	})
}

// producer returns a client for producing to the test's topics.
func (e *env) producer(extra ...kgo.Opt) *kgo.Client {
	e.t.Helper()
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(e.seeds...),
		kgo.MetadataMinAge(250 * time.Millisecond),
		kgo.ProducerLinger(10 * time.Millisecond),
		kgo.MaxBufferedRecords(100_000),
		kgo.ProducerBatchMaxBytes(1 << 20),
		kgo.RecordRetries(20),
	}, extra...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(cl.Close)
	return cl
}

// produce writes recs synchronously in chunks; afterwards each record has
// its partition and offset.
func (e *env) produce(cl *kgo.Client, recs []*kgo.Record) {
	e.t.Helper()
	const chunk = 20_000
	for i := 0; i < len(recs); i += chunk {
		part := recs[i:min(i+chunk, len(recs))]
		ctx, cancel := context.WithTimeout(e.ctx, 2*time.Minute)
		err := cl.ProduceSync(ctx, part...).FirstErr()
		cancel()
		if err != nil {
			e.t.Fatalf("produce: %v", err)
		}
	}
}

// keyed makes n records for topic over aggregates aggregate IDs chosen at
// random, each value a Wow event stream (see wowEvent) with a seq counting
// per aggregate ID in seqs, its event padded with pad random hex digits
// (data that compresses about as little as real event payloads with IDs and
// hashes, so the broker's batches are not inflated many times on
// decompression).
func (e *env) keyed(topic string, n, aggregates int, seqs map[string]int64, pad int) []*kgo.Record {
	return e.keyedPad(topic, n, aggregates, seqs, pad, false)
}

// keyedPad is keyed; with compressible, the padding is one repeated
// character instead of random digits.
func (e *env) keyedPad(topic string, n, aggregates int, seqs map[string]int64, pad int, compressible bool) []*kgo.Record {
	context, aggregate := e.aggregateOf(topic)
	recs := make([]*kgo.Record, n)
	const hexDigits = "0123456789abcdef"
	var padding []byte
	for i := range recs {
		key := fmt.Sprintf("agg-%d", e.rng.IntN(aggregates))
		seq := seqs[key]
		seqs[key] = seq + 1
		padding = padding[:0]
		for j := 0; j < pad; j += 16 {
			r := e.rng.Uint64()
			if compressible {
				r = 0
			}
			for k := 0; k < 16 && j+k < pad; k++ {
				padding = append(padding, hexDigits[r&15])
				r >>= 4
			}
		}
		recs[i] = &kgo.Record{Topic: topic, Key: []byte(key), Value: wowEvent(context, aggregate, key, seq, string(padding))}
	}
	return recs
}

// aggregateOf returns the context name and aggregate of one of the test's
// topics (<prefix><alias>.<aggregate>.<kind>; the tests name each context
// by its alias).
func (e *env) aggregateOf(topic string) (context, aggregate string) {
	parts := strings.Split(strings.TrimPrefix(topic, e.prefix()), ".")
	if len(parts) != 3 {
		e.t.Fatalf("topic %s: not <prefix><alias>.<aggregate>.<kind>", topic)
	}
	return parts[0], parts[1]
}

// wowEvent returns the value of a Wow event stream of one event, as Wow
// services write it to <prefix><alias>.<aggregate>.event, with a top-level
// "seq" (ignored by Wow and wowd) for the sink's order checks; pad, if not
// empty, goes into the event's body.
func wowEvent(context, aggregate, aggregateID string, seq int64, pad string) []byte {
	// Built with appends, not fmt: the large tests make a million of these
	// under -race.
	id, _ := json.Marshal(aggregateID)
	sum := sha256.Sum256(strconv.AppendInt(append(id[:len(id):len(id)], '/'), seq, 10))
	v := make([]byte, 0, 400+len(id)+len(context)+len(aggregate)+len(pad))
	v = append(v, `{"id":"`...)
	v = hex.AppendEncode(v, sum[:])
	v = append(append(append(v, `","contextName":"`...), context...), `","aggregateName":"`...)
	v = append(append(append(append(v, aggregate...), `","aggregateId":`...), id...), `,"seq":`...)
	v = strconv.AppendInt(v, seq, 10)
	v = append(v, `,"header":{"upstream_name":"add_cart_item"},"tenantId":"(0)","commandId":"c-`...)
	v = strconv.AppendInt(v, seq, 10)
	v = append(v, `","requestId":"r-`...)
	v = strconv.AppendInt(v, seq, 10)
	v = append(v, `","version":`...)
	v = strconv.AppendInt(v, seq+1, 10)
	v = append(v, `,"body":[{"id":"e-`...)
	v = strconv.AppendInt(v, seq, 10)
	v = append(v, `","name":"cart_item_added","revision":"0.0.1","bodyType":"test.CartItemAdded","body":{"seq":`...)
	v = strconv.AppendInt(v, seq, 10)
	if pad != "" {
		v = append(append(append(v, `,"pad":"`...), pad...), '"')
	}
	v = append(v, `}}],"createTime":`...)
	return append(strconv.AppendInt(v, time.Now().UnixMilli(), 10), '}')
}

// endOffsets returns the end offset of every partition of topics.
func (e *env) endOffsets(topics ...string) map[tpKey]int64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	lo, err := e.adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = lo.Error()
	}
	if err != nil {
		e.t.Fatalf("list end offsets of %v: %v", topics, err)
	}
	out := make(map[tpKey]int64)
	lo.Each(func(o kadm.ListedOffset) { out[tpKey{o.Topic, o.Partition}] = o.Offset })
	return out
}

// committed returns the group's committed offsets.
func (e *env) committed(group string) (map[tpKey]int64, error) {
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	or, err := e.adm.FetchOffsets(ctx, group)
	if err == nil {
		err = or.Error()
	}
	if err != nil {
		return nil, err
	}
	out := make(map[tpKey]int64)
	or.Each(func(o kadm.OffsetResponse) { out[tpKey{o.Topic, o.Partition}] = o.At })
	return out, nil
}

// waitCommittedAtEnd waits until the group's committed offsets equal ends.
func (e *env) waitCommittedAtEnd(group string, ends map[tpKey]int64, timeout time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	var last map[tpKey]int64
	for {
		c, err := e.committed(group)
		if err == nil {
			last = c
			behind := 0
			for tp, end := range ends {
				if c[tp] != end {
					behind++
				}
			}
			if behind == 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("group %s: committed offsets %v, want the end offsets %v (last error %v)", group, fmtOffsets(last), fmtOffsets(ends), err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// checkCommittedDelivered asserts at-least-once for what the group committed:
// every record below a committed offset reached the sink (skip: records that
// go elsewhere, such as dead letters).
func (e *env) checkCommittedDelivered(s *sink, group string, skip map[tpoKey]bool) {
	e.t.Helper()
	c, err := e.committed(group)
	if err != nil {
		e.t.Fatalf("fetch offsets of %s: %v", group, err)
	}
	for _, tp := range sortedTPs(c) {
		if off, ok := s.deliveredPrefix(tp, c[tp], skip); !ok {
			e.t.Errorf("group %s committed %s[%d] at %d, but offset %d never reached the sink", group, tp.topic, tp.partition, c[tp], off)
		}
	}
}

func fmtOffsets(m map[tpKey]int64) string {
	var b strings.Builder
	for _, tp := range sortedTPs(m) {
		fmt.Fprintf(&b, "%d:%d ", tp.partition, m[tp])
	}
	return strings.TrimSpace(b.String())
}

func sum(m map[tpKey]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// waitDelivered waits until every record of [0, end) of each partition in
// ends (except skip) reached the sink, failing fast if a wowd process died.
func waitDelivered(t *testing.T, s *sink, c *cluster, ends map[tpKey]int64, skip map[tpoKey]bool, timeout time.Duration) {
	t.Helper()
	want := sum(ends) - int64(len(skip))
	start := time.Now()
	deadline := start.Add(timeout)
	nextLog := start.Add(15 * time.Second)
	for {
		if s.delivered.Load() >= want {
			if _, n := s.missing(ends, skip, 0); n == 0 {
				t.Logf("all %d records delivered after %v", want, time.Since(start).Round(time.Millisecond))
				return
			}
		}
		if c != nil {
			c.checkAlive()
		}
		now := time.Now()
		if now.After(deadline) {
			list, n := s.missing(ends, skip, 20)
			t.Fatalf("after %v, %d of %d records never reached the sink; the first: %v", timeout, n, want, list)
		}
		if now.After(nextLog) {
			nextLog = now.Add(15 * time.Second)
			t.Logf("waiting: %d of %d records delivered (%d duplicates)", s.delivered.Load(), want, s.dups.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
