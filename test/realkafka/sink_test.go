package realkafka

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// sink is the HTTP endpoint wowd delivers to. It records every request: a
// request answered 2xx is a delivery, one answered otherwise a failed
// attempt. It checks, per aggregate (topic and record key), that first
// deliveries come in increasing offset (and seq) order, and counts
// duplicates: deliveries of a (topic, partition, offset) seen before.
type sink struct {
	srv *httptest.Server

	latency atomic.Int64 // nanoseconds each request is held before its answer
	status  atomic.Int32 // answer of every request; 0 means 200
	// reject, when set, answers 422 (a permanent failure) to the requests
	// it returns true for.
	reject atomic.Pointer[func(d *delivery) bool]

	active    atomic.Int64 // requests being served now
	maxActive atomic.Int64

	requests  atomic.Int64 // every request
	failed    atomic.Int64 // requests answered with a status that is not 2xx
	delivered atomic.Int64 // distinct records answered 2xx
	dups      atomic.Int64 // 2xx answers to records delivered before
	badReqs   atomic.Int64 // requests without the Kafka position headers

	mu         sync.Mutex
	parts      map[tpKey]*partLog
	keys       map[string]*keyLog // by topic + "\x00" + key
	violations []string           // order violations and malformed requests (first 50)
	nViolation int
	dupList    []string       // the first duplicates, for the log
	attempts   map[tpoKey]int // failed attempts per record
	maxAttempt int            // highest wowd-attempt header seen
	overlaps   int            // requests that arrived while one of the same aggregate was being served
	// overtaken is the largest distance, in offsets, between a record's
	// first delivery and the newest record of its partition delivered
	// before it: how far other aggregates ran ahead of it.
	overtaken int64
	// keep tells the topics whose first deliveries are kept in headers: the
	// request headers plus X-Body-Sha256 and X-Body-Len of the body.
	keep    func(topic string) bool // guarded by mu
	headers map[tpoKey]http.Header
}

type tpKey struct {
	topic     string
	partition int32
}

type tpoKey struct {
	topic     string
	partition int32
	offset    int64
}

// partLog counts the deliveries of each offset of a partition.
type partLog struct {
	counts []uint8 // by offset; saturates at 255
	newest int64   // highest offset delivered
}

type keyLog struct {
	lastOffset int64 // offset of the newest first delivery
	lastSeq    int64 // its seq, -1 if none
	active     int   // requests of this aggregate being served
}

// delivery is what the sink read from one request.
type delivery struct {
	topic     string
	partition int32
	offset    int64
	key       string
	seq       int64 // from the JSON value {"seq":N}; -1 if absent
	bodyLen   int
	attempt   int
}

func newSink(t *testing.T) *sink {
	s := &sink{
		parts:    make(map[tpKey]*partLog),
		keys:     make(map[string]*keyLog),
		attempts: make(map[tpoKey]int),
		headers:  make(map[tpoKey]http.Header),
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve)) // listens on 127.0.0.1
	t.Cleanup(s.srv.Close)
	return s
}

func (s *sink) URL() string { return s.srv.URL + "/wow" }

// keepFor makes the sink keep the headers and body hashes of the first
// deliveries of the topics keep accepts (see headersOf).
func (s *sink) keepFor(keep func(topic string) bool) {
	s.mu.Lock()
	s.keep = keep
	s.mu.Unlock()
}

func (s *sink) setLatency(d time.Duration) { s.latency.Store(int64(d)) }
func (s *sink) setStatus(code int)         { s.status.Store(int32(code)) }

func (s *sink) violate(format string, args ...any) {
	s.nViolation++
	if len(s.violations) < 50 {
		s.violations = append(s.violations, fmt.Sprintf(format, args...))
	}
}

func (s *sink) serve(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	n := s.active.Add(1)
	defer s.active.Add(-1)
	for {
		m := s.maxActive.Load()
		if n <= m || s.maxActive.CompareAndSwap(m, n) {
			break
		}
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	d, err := parseDelivery(r, body)
	if err != nil {
		s.badReqs.Add(1)
		s.mu.Lock()
		s.violate("malformed request: %v", err)
		s.mu.Unlock()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	aggr := d.topic + "\x00" + d.key

	s.mu.Lock()
	k := s.keys[aggr]
	if k == nil {
		k = &keyLog{lastOffset: -1, lastSeq: -1}
		s.keys[aggr] = k
	}
	if k.active > 0 {
		s.overlaps++
	}
	k.active++
	s.maxAttempt = max(s.maxAttempt, d.attempt)
	s.mu.Unlock()

	if lat := time.Duration(s.latency.Load()); lat > 0 {
		time.Sleep(lat)
	}
	code := int(s.status.Load())
	if code == 0 {
		code = http.StatusOK
	}
	if rej := s.reject.Load(); rej != nil && (*rej)(d) {
		code = http.StatusUnprocessableEntity
	}

	s.mu.Lock()
	k.active--
	tpo := tpoKey{d.topic, d.partition, d.offset}
	if code < 200 || code > 299 {
		s.attempts[tpo]++
		s.mu.Unlock()
		s.failed.Add(1)
		w.WriteHeader(code)
		return
	}
	p := s.parts[tpKey{d.topic, d.partition}]
	if p == nil {
		p = &partLog{}
		s.parts[tpKey{d.topic, d.partition}] = p
	}
	if d.offset >= int64(len(p.counts)) {
		p.counts = slices.Grow(p.counts, int(d.offset)+1-len(p.counts))[:d.offset+1]
	}
	first := p.counts[d.offset] == 0
	if first {
		s.overtaken = max(s.overtaken, p.newest-d.offset)
		p.newest = max(p.newest, d.offset)
	}
	if p.counts[d.offset] < 255 {
		p.counts[d.offset]++
	}
	if first {
		if d.offset <= k.lastOffset {
			s.violate("aggregate %q of %s: first delivery of offset %d (partition %d) after offset %d",
				d.key, d.topic, d.offset, d.partition, k.lastOffset)
		}
		if d.seq >= 0 && d.seq <= k.lastSeq {
			s.violate("aggregate %q of %s: first delivery of seq %d (offset %d) after seq %d",
				d.key, d.topic, d.seq, d.offset, k.lastSeq)
		}
		k.lastOffset = max(k.lastOffset, d.offset)
		if d.seq >= 0 {
			k.lastSeq = max(k.lastSeq, d.seq)
		}
		if s.keep != nil && s.keep(d.topic) {
			h := r.Header.Clone()
			h.Set("X-Body-Sha256", fmt.Sprintf("%x", sha256.Sum256(body)))
			h.Set("X-Body-Len", strconv.Itoa(len(body)))
			s.headers[tpo] = h
		}
	} else if len(s.dupList) < 20 {
		s.dupList = append(s.dupList, fmt.Sprintf("%s[%d]@%d key %q", d.topic, d.partition, d.offset, d.key))
	}
	s.mu.Unlock()
	if first {
		s.delivered.Add(1)
	} else {
		s.dups.Add(1)
	}
	w.WriteHeader(code)
}

func parseDelivery(r *http.Request, body []byte) (*delivery, error) {
	h := r.Header
	d := &delivery{topic: h.Get("kafka-topic"), seq: -1, bodyLen: len(body)}
	if d.topic == "" {
		return nil, fmt.Errorf("no kafka-topic header")
	}
	p, err := strconv.ParseInt(h.Get("kafka-partition"), 10, 32)
	if err != nil {
		return nil, fmt.Errorf("kafka-partition: %v", err)
	}
	d.partition = int32(p)
	if d.offset, err = strconv.ParseInt(h.Get("kafka-offset"), 10, 64); err != nil {
		return nil, fmt.Errorf("kafka-offset: %v", err)
	}
	if vs, ok := h["Kafka-Key"]; ok && len(vs) == 1 {
		d.key = vs[0]
	} else if b64 := h.Get("kafka-key-base64"); b64 != "" {
		raw, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, fmt.Errorf("kafka-key-base64: %v", err)
		}
		d.key = string(raw)
	} else {
		return nil, fmt.Errorf("no kafka-key or kafka-key-base64 header")
	}
	if a := h.Get("wowd-attempt"); a != "" {
		d.attempt, _ = strconv.Atoi(a)
	}
	if len(body) > 0 && body[0] == '{' {
		var v struct {
			Seq *int64 `json:"seq"`
		}
		if json.Unmarshal(body, &v) == nil && v.Seq != nil {
			d.seq = *v.Seq
		}
	}
	return d, nil
}

// count returns how often the record was delivered (answered 2xx).
func (s *sink) count(topic string, partition int32, offset int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.parts[tpKey{topic, partition}]
	if p == nil || offset >= int64(len(p.counts)) {
		return 0
	}
	return int(p.counts[offset])
}

// missing returns the records of [0, end) of each partition in ends that were
// never delivered, except those in skip; at most limit are listed, n counts
// them all.
func (s *sink) missing(ends map[tpKey]int64, skip map[tpoKey]bool, limit int) (list []string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, tp := range sortedTPs(ends) {
		p := s.parts[tp]
		for off := int64(0); off < ends[tp]; off++ {
			if skip[tpoKey{tp.topic, tp.partition, off}] {
				continue
			}
			if p == nil || off >= int64(len(p.counts)) || p.counts[off] == 0 {
				n++
				if len(list) < limit {
					list = append(list, fmt.Sprintf("%s[%d]@%d", tp.topic, tp.partition, off))
				}
			}
		}
	}
	return list, n
}

// deliveredPrefix reports whether every offset below upTo of the partition was
// delivered; if not, it returns the first that was not.
func (s *sink) deliveredPrefix(tp tpKey, upTo int64, skip map[tpoKey]bool) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.parts[tp]
	for off := int64(0); off < upTo; off++ {
		if skip[tpoKey{tp.topic, tp.partition, off}] {
			continue
		}
		if p == nil || off >= int64(len(p.counts)) || p.counts[off] == 0 {
			return off, false
		}
	}
	return 0, true
}

// dupsByPartition counts duplicate deliveries per partition.
func (s *sink) dupsByPartition() map[tpKey]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[tpKey]int)
	for tp, p := range s.parts {
		for _, c := range p.counts {
			if c > 1 {
				out[tp] += int(c) - 1
			}
		}
	}
	return out
}

type sinkReport struct {
	violations []string
	nViolation int
	overlaps   int
	dupList    []string
	maxAttempt int
	attempts   map[tpoKey]int
	overtaken  int64
}

func (s *sink) report() sinkReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sinkReport{
		violations: slices.Clone(s.violations),
		nViolation: s.nViolation,
		overlaps:   s.overlaps,
		dupList:    slices.Clone(s.dupList),
		maxAttempt: s.maxAttempt,
		attempts:   s.copyAttempts(),
		overtaken:  s.overtaken,
	}
}

func (s *sink) copyAttempts() map[tpoKey]int {
	out := make(map[tpoKey]int, len(s.attempts))
	for k, v := range s.attempts {
		out[k] = v
	}
	return out
}

// headersOf returns the request headers kept for a record (see keep).
func (s *sink) headersOf(k tpoKey) http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.headers[k]
}

// checkOrder fails the test on order violations and malformed requests, and
// logs the duplicates.
func (s *sink) checkOrder(t *testing.T) {
	t.Helper()
	rep := s.report()
	if rep.nViolation > 0 {
		t.Errorf("sink: %d order violations or malformed requests; the first:\n  %s",
			rep.nViolation, strings.Join(rep.violations, "\n  "))
	}
	s.logDuplicates(t)
}

func (s *sink) logDuplicates(t *testing.T) {
	t.Helper()
	rep := s.report()
	byPart := s.dupsByPartition()
	var parts []string
	for _, tp := range sortedTPs(byPart) {
		parts = append(parts, fmt.Sprintf("%s[%d]:%d", tp.topic, tp.partition, byPart[tp]))
	}
	t.Logf("sink: %d distinct records delivered, %d duplicates, %d requests (%d not 2xx), max %d requests at once, %d same-aggregate overlaps, records overtaken by up to %d offsets of their partition",
		s.delivered.Load(), s.dups.Load(), s.requests.Load(), s.failed.Load(), s.maxActive.Load(), rep.overlaps, rep.overtaken)
	if len(parts) > 0 {
		t.Logf("sink: duplicates by partition: %s", strings.Join(parts, " "))
		t.Logf("sink: first duplicates: %s", strings.Join(rep.dupList, ", "))
	}
}

func sortedTPs[V any](m map[tpKey]V) []tpKey {
	out := make([]tpKey, 0, len(m))
	for tp := range m {
		out = append(out, tp)
	}
	slices.SortFunc(out, func(a, b tpKey) int {
		if c := strings.Compare(a.topic, b.topic); c != 0 {
			return c
		}
		return int(a.partition - b.partition)
	})
	return out
}

// lastSeq returns the highest seq of the aggregate's first deliveries, -1
// before any.
func (s *sink) lastSeq(topic, key string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := s.keys[topic+"\x00"+key]; k != nil {
		return k.lastSeq
	}
	return -1
}
