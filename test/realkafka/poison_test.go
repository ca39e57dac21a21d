package realkafka

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	poisonPartitions = 4
	poisonNormal     = 250        // normal records per partition, before and again after the poison
	poisonLarge      = 900 * 1000 // bytes of a very large value; the broker's limit is about 1 MiB
	poisonHeaders    = 500        // headers of the record with many headers
)

// TestPoisonRecords: records without a key, values that are not JSON (binary,
// invalid UTF-8, empty, null), values near the broker's size limit, records
// with hundreds of headers (some of them not valid in HTTP) and odd keys,
// between normal records on every partition. No partition stalls: the
// normal records after the poison all arrive; the keyless records (and,
// with format wow, the ones that are no Wow message of their key) land in
// <topic>.dlq with the wowd-dlq-* headers; every other record reaches the
// sink with its value unchanged; wowd keeps running and commits to the end.
// It runs with both record formats: wow (the default: values are decoded
// and checked against key and topic) and raw (any bytes pass).
func TestPoisonRecords(t *testing.T) {
	for _, format := range []string{"wow", "raw"} {
		t.Run("format="+format, func(t *testing.T) { poison(t, format) })
	}
}

func poison(t *testing.T, format string) {
	began := time.Now()
	e := newEnv(t, "poison"+format)
	topic := e.topic("shop", "cart")
	dlq := topic + ".dlq"
	e.createTopic(topic, poisonPartitions)
	// wowd creates the dead-letter topic when it starts.
	e.deleteAtEnd(dlq)
	s := newSink(t)
	s.keepFor(func(tp string) bool { return tp == topic })
	cfg := e.config("shop", []string{"cart"}, s.URL())
	cfg.Format = format
	c := newCluster(e, cfg)
	p := c.startN(1)[0]
	group := e.group("shop")

	prod := e.producer(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	seqs := make(map[string]int64)
	event := func(key []byte, pad string) []byte {
		seq := seqs[string(key)]
		seqs[string(key)]++
		return wowEvent("shop", "cart", string(key), seq, pad)
	}
	normal := func(part int32) []*kgo.Record {
		var recs []*kgo.Record
		for i := range poisonNormal {
			key := fmt.Appendf(nil, "p%d-agg-%d", part, i%10)
			recs = append(recs, &kgo.Record{Topic: topic, Partition: part, Key: key, Value: event(key, "")})
		}
		return recs
	}
	large := func() string {
		v := make([]byte, poisonLarge)
		const hexDigits = "0123456789abcdef"
		for i := range v {
			v[i] = hexDigits[e.rng.IntN(16)]
		}
		return string(v)
	}
	manyHeaders := func() []kgo.RecordHeader {
		var hs []kgo.RecordHeader
		for i := range poisonHeaders {
			hs = append(hs, kgo.RecordHeader{Key: fmt.Sprintf("h-%d", i), Value: []byte(strings.Repeat("v", 100))})
		}
		return append(hs,
			kgo.RecordHeader{Key: "bad header name", Value: []byte("x")},
			kgo.RecordHeader{Key: "", Value: []byte("empty name")},
			kgo.RecordHeader{Key: "ctl", Value: []byte("a\r\nInjected: yes\x00")},
			kgo.RecordHeader{Key: "binary", Value: []byte{0xff, 0xfe, 0x00, 0x01}},
			kgo.RecordHeader{Key: "utf8", Value: []byte("grüße, 世界")},
			kgo.RecordHeader{Key: "dup", Value: []byte("1")},
			kgo.RecordHeader{Key: "dup", Value: []byte("2")},
			kgo.RecordHeader{Key: "content-type", Value: []byte("application/x-poison")},
			kgo.RecordHeader{Key: "nil-value", Value: nil},
		)
	}

	var recs []*kgo.Record
	for part := range int32(poisonPartitions) {
		recs = append(recs, normal(part)...)
	}
	dead := make(map[*kgo.Record]bool) // go to the dead-letter topic
	kinds := make(map[*kgo.Record]string)
	// add adds an odd record; wowOK says it is a valid Wow message of its key.
	add := func(kind string, r *kgo.Record, wowOK bool) {
		r.Topic = topic
		if len(r.Key) == 0 || (format == "wow" && !wowOK) {
			dead[r] = true
		}
		kinds[r] = kind
		recs = append(recs, r)
	}
	for part := range int32(poisonPartitions) {
		k := func(s string) []byte { return fmt.Appendf(nil, "p%d-%s", part, s) }
		add("nil key", &kgo.Record{Partition: part, Key: nil, Value: wowEvent("shop", "cart", "none", 0, "")}, false)
		add("empty key", &kgo.Record{Partition: part, Key: []byte{}, Value: []byte(`{"poison":"empty key"}`)}, false)
		add("nil key, binary value", &kgo.Record{Partition: part, Value: []byte{0x00, 0xff, 0xc3, 0x28}}, false)
		add("binary value", &kgo.Record{Partition: part, Key: k("agg-1"), Value: []byte{0x00, 0xff, 0xfe, 0xc3, 0x28, '{'}}, false)
		add("text value", &kgo.Record{Partition: part, Key: k("agg-2"), Value: []byte("not json at all")}, false)
		add("truncated JSON", &kgo.Record{Partition: part, Key: k("agg-3"), Value: []byte(`{"seq":`)}, false)
		add("null value", &kgo.Record{Partition: part, Key: k("agg-4"), Value: nil}, false)
		add("empty value", &kgo.Record{Partition: part, Key: k("agg-5"), Value: []byte{}}, false)
		add("JSON, not Wow", &kgo.Record{Partition: part, Key: k("json"), Value: []byte(`{"poison":"json, not wow"}`)}, false)
		add("Wow message of another key", &kgo.Record{Partition: part, Key: k("other-key"), Value: wowEvent("shop", "cart", "someone-else", 0, "")}, false)
		add("Wow message of another aggregate", &kgo.Record{Partition: part, Key: k("other-aggregate"), Value: wowEvent("shop", "order", string(k("other-aggregate")), 0, "")}, false)
		add("large value", &kgo.Record{Partition: part, Key: k("agg-6"), Value: event(k("agg-6"), large())}, true)
		add("many headers", &kgo.Record{Partition: part, Key: k("agg-7"), Value: event(k("agg-7"), ""), Headers: manyHeaders()}, true)
		binKey := append([]byte{0xff, 0xfe, 0x00}, k("bin")...)
		add("binary key", &kgo.Record{Partition: part, Key: binKey, Value: event(binKey, "")}, false) // no JSON string holds these bytes
		nlKey := k("line\nbreak")
		add("key with newline", &kgo.Record{Partition: part, Key: nlKey, Value: event(nlKey, "")}, true)
		uniKey := k("käse-世界 :\"%<&>")
		add("unicode key", &kgo.Record{Partition: part, Key: uniKey, Value: event(uniKey, "")}, true)
		longKey := k(strings.Repeat("k", 8000))
		add("long key", &kgo.Record{Partition: part, Key: longKey, Value: event(longKey, "")}, true)
	}
	add("empty key, large value", &kgo.Record{Partition: 0, Key: []byte{}, Value: []byte(large())}, false)
	for part := range int32(poisonPartitions) {
		recs = append(recs, normal(part)...)
	}
	e.produce(prod, recs)
	ends := e.endOffsets(topic)
	if sum(ends) != int64(len(recs)) {
		t.Fatalf("end offsets add up to %d, produced %d", sum(ends), len(recs))
	}
	skip := make(map[tpoKey]bool)
	for r := range dead {
		skip[tpoKey{r.Topic, r.Partition, r.Offset}] = true
	}
	t.Logf("format %s: produced %d records: %d normal, %d odd, %d of them for the dead-letter topic", format, len(recs),
		2*poisonNormal*poisonPartitions, len(kinds), len(dead))

	// Every other record arrives, the normal ones after the poison included.
	waitDelivered(t, s, c, ends, skip, 3*time.Minute)
	s.checkOrder(t)
	if p.exited() {
		c.fatalf("wowd exited: %v", p.werr)
	}
	checkHealthz(t, p)

	// The sink got each odd keyed record as it was produced.
	for _, r := range recs {
		kind, odd := kinds[r]
		if !odd || dead[r] {
			continue
		}
		h := s.headersOf(tpoKey{r.Topic, r.Partition, r.Offset})
		if h == nil {
			t.Errorf("%s at %d@%d: no request headers kept", kind, r.Partition, r.Offset)
			continue
		}
		if got, want := h.Get("X-Body-Sha256"), fmt.Sprintf("%x", sha256.Sum256(r.Value)); got != want {
			t.Errorf("%s at %d@%d: body sha256 %s (%s bytes), want %s (%d bytes)", kind, r.Partition, r.Offset,
				got, h.Get("X-Body-Len"), want, len(r.Value))
		}
		switch kind {
		case "many headers":
			n := 0
			for name := range h {
				if strings.HasPrefix(name, "Kafka-Header-H-") {
					n++
				}
			}
			if n != poisonHeaders {
				t.Errorf("many headers at %d@%d: %d kafka-header-h-* request headers, want %d", r.Partition, r.Offset, n, poisonHeaders)
			}
			if got := h.Get("Content-Type"); got != "application/x-poison" {
				t.Errorf("many headers: Content-Type %q, want the record's content-type header", got)
			}
			if got := h.Values("Kafka-Header-Dup"); len(got) != 2 {
				t.Errorf("many headers: kafka-header-dup %q, want both values", got)
			}
			if h.Get("Injected") != "" {
				t.Errorf("many headers: a header value injected a request header")
			}
		case "binary key", "key with newline":
			if h.Get("Kafka-Key-Base64") == "" {
				t.Errorf("%s at %d@%d: no kafka-key-base64 header (headers %v)", kind, r.Partition, r.Offset, h)
			}
		}
	}

	// Nothing stalled: the group commits to the end of every partition (and
	// so past every dead letter written).
	e.waitCommittedAtEnd(group, ends, time.Minute)
	// On a loaded machine a missed session timeout can take the partitions
	// away and give them back: records may then be dead-lettered twice
	// (at-least-once), which is logged, not failed.
	revoked, lost := rebalanceEvents(t, p)
	repeats := revoked+lost > 0

	// The others are in the dead-letter topic, with their source.
	checkDeadLetters(t, e, dlq, dead, kinds, repeats)
	// None of them reached the handler: dead-lettered as they came, they
	// count as unroutable, not as a handler's dead letters (which
	// WowdHandlerErrorRatio reads as failed attempts).
	if m, err := scrape(p.metrics); err == nil {
		unroutable := 0
		for labels, v := range m["wowd_messages_total"] {
			if v > 0 {
				t.Logf("wowd_messages_total{%s} = %v", labels, v)
			}
			if strings.Contains(labels, `outcome="dead_lettered"`) && v > 0 {
				t.Errorf("wowd_messages_total{%s} = %v, want 0: no handler failed", labels, v)
			}
			if strings.Contains(labels, `outcome="unroutable"`) {
				unroutable += int(v)
			}
		}
		if unroutable < len(dead) || !repeats && unroutable != len(dead) {
			t.Errorf("wowd_messages_total{outcome=\"unroutable\"} = %d, want %d (partitions revoked %v, lost %v)", unroutable, len(dead), revoked, lost)
		}
	}
	c.stopAll()
	e.checkCommittedDelivered(s, group, skip)
	c.checkLogs()
	t.Logf("RESULT poison, format %s: %d records (%d odd, %d dead-lettered), %d duplicates, took %v",
		format, len(recs), len(kinds), len(dead), s.dups.Load(), time.Since(began).Round(time.Second))
}

func checkHealthz(t *testing.T, p *proc) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + p.metrics + "/healthz")
	if err != nil {
		t.Fatalf("%s /healthz: %v", p.name, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s /healthz: %s", p.name, resp.Status)
	}
}

// checkDeadLetters reads the dead-letter topic from its start and checks that
// it holds exactly the records of want, with the wowd-dlq-* headers, their
// key and their value. With repeats, a record may be there more than once.
func checkDeadLetters(t *testing.T, e *env, dlq string, want map[*kgo.Record]bool, kinds map[*kgo.Record]string, repeats bool) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds...), kgo.MetadataMinAge(250*time.Millisecond),
		kgo.ConsumeTopics(dlq), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	bySource := make(map[string]*kgo.Record)
	for r := range want {
		bySource[fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset)] = r
	}
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	got, again := 0, 0
	seen := make(map[string]bool)
	classes := make(map[string]int)
	for got-again < len(want) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("dead-letter topic %s: %d of %d records after a minute", dlq, got, len(want))
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s[%d]: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			got++
			h := make(map[string]string)
			for _, rh := range r.Headers {
				h[rh.Key] = string(rh.Value)
			}
			src := fmt.Sprintf("%s/%s/%s", h["wowd-dlq-source-topic"], h["wowd-dlq-source-partition"], h["wowd-dlq-source-offset"])
			if repeats && seen[src] {
				again++
				return
			}
			orig, ok := bySource[src]
			if !ok {
				t.Errorf("dead letter at %d with source %q: not one of the records expected there (headers %v)", r.Offset, src, h)
				return
			}
			delete(bySource, src)
			seen[src] = true
			kind := kinds[orig]
			class := h["wowd-dlq-error-class"]
			classes[fmt.Sprintf("%s: %s (%.80s)", kind, class, h["wowd-dlq-error-message"])]++
			switch {
			case class == "":
				t.Errorf("dead letter of %s (%s): no wowd-dlq-error-class header", src, kind)
			case len(orig.Key) == 0 && class != "unroutable":
				t.Errorf("dead letter of %s (%s): class %q, want unroutable", src, kind, class)
			}
			if h["wowd-dlq-dispatcher"] != "sink" {
				t.Errorf("dead letter of %s: wowd-dlq-dispatcher %q, want sink", src, h["wowd-dlq-dispatcher"])
			}
			if string(r.Key) != string(orig.Key) || string(r.Value) != string(orig.Value) {
				t.Errorf("dead letter of %s (%s): key %q and %d value bytes, want the source's key %q and %d value bytes",
					src, kind, r.Key, len(r.Value), orig.Key, len(orig.Value))
			}
		})
	}
	// Nothing more than expected: poll once more briefly.
	short, cancel2 := context.WithTimeout(e.ctx, 2*time.Second)
	defer cancel2()
	extra := cl.PollFetches(short).NumRecords()
	if repeats {
		again, extra = again+extra, 0
	}
	if again > 0 {
		t.Logf("dead-letter topic: %d records written again after partitions moved", again)
	}
	if len(bySource) > 0 || extra > 0 {
		var missing []string
		for src, r := range bySource {
			missing = append(missing, src+" ("+kinds[r]+")")
		}
		t.Errorf("dead-letter topic: %d records missing %v, %d unexpected", len(bySource), missing, extra)
	}
	var lines []string
	for c, n := range classes {
		lines = append(lines, fmt.Sprintf("%d× %s", n, c))
	}
	slices.Sort(lines)
	t.Logf("dead-letter topic %s holds the %d records expected:\n  %s", dlq, len(want)-len(bySource), strings.Join(lines, "\n  "))
}
