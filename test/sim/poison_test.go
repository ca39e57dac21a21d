package sim

import (
	"cmp"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/receiver"
	"github.com/wowd/wowd/internal/wow"
)

// Poison records: records wowd cannot route. In a third of the seeds,
// drawn apart from the others (poisonFor; -poison runs every seed so), the
// producer (produce) also writes, among each batch's records, at positions
// drawn from the seed, up to two records no handler may get
// (docs/operations.md, "Wow messages" and "Failures, retries and dead
// letters"):
//
//   - in every mode, a record without a key: unroutable (in raw mode as
//     well: the receiver routes by key before anything else);
//   - in the version-check mode (Wow messages), also a value that does not
//     decode (cut short, or not JSON at all): undecodable; an event stream
//     whose aggregateId is another aggregate's than its key: mismatch; and
//     one of another aggregate type than its topic's: mismatch.
//
// A keyed one goes to its key's partition (as produce partitions), so that
// it comes among its key's records and behind them when they are parked.
// Poison records are kept apart from the aggregates' bookkeeping (no
// sequence number, not in produced nor keyOf): their values never parse as
// a message of the simulation (parseValue), so that a dead letter of one
// acknowledged before its producer heard where it went is held as a stub
// would be, and settled once its position is registered. Checked:
//
//   - never handed to the handler (no try of its position, and no request
//     for it at the sink's server);
//   - dead-lettered by the receiver (wowd-dlq-* headers) with its class in
//     wowd-dlq-error-class (unroutable, undecodable, mismatch), never a
//     handler failure's class; or, where the brokers refused its
//     dead-letter writes until the receiver gave up, counted as that
//     documented loss (promises_test.go); or, where it came while its key's
//     aggregate was parked, parked behind it (its parked copy of class
//     parked, never the head of a parking: it has no aggregate to hold)
//     and dead-lettered from that parking by an operator's discard (judged
//     like every such dead letter) or by the receiver as the redrive
//     screens it;
//   - settled like any record, so that the partitions must still be
//     committed to their end (the run's calm check);
//   - each member's wowd_messages_total{outcome="unroutable"} equals the
//     dead letters of poison records the brokers acknowledged to it from
//     its receiver (each is counted as its write is acknowledged; no other
//     record of the simulation is unroutable).

var poisonFlag = flag.Bool("poison", false, "run every seed with poison records (keyless; with the version check also undecodable and mismatched) among the records produced")

// poisonFor reports whether the seed's producer writes poison records. Not
// from the run's rng: the other choices of a seed stay as they were.
func poisonFor(seed uint64) bool { return mix(seed, 83)%3 == 0 || *poisonFlag }

type poisonKind uint8

const (
	poisonKeyless     poisonKind = iota // no key
	poisonUndecodable                   // a value that is no Wow message
	poisonMismatch                      // an event stream of another aggregate than its key
	poisonForeign                       // an event stream of another aggregate type than its topic's
	numPoisonKinds
)

var poisonNames = [numPoisonKinds]string{"keyless", "undecodable", "mismatched id", "foreign aggregate"}

// class is the wowd-dlq-error-class the receiver must dead-letter it with.
func (k poisonKind) class() string {
	switch k {
	case poisonKeyless:
		return "unroutable"
	case poisonUndecodable:
		return "undecodable"
	default:
		return "mismatch"
	}
}

// poisonRec is a poison record produced: its kind, key ("" without one)
// and number within the run.
type poisonRec struct {
	kind poisonKind
	key  string
	n    int
}

func (pr poisonRec) String() string {
	return fmt.Sprintf("poison #%d, %s, key %q", pr.n, poisonNames[pr.kind], pr.key)
}

// parkedBehind is the wowd-parked-class of a message parked behind its
// aggregate's parked messages (the receiver's job.park): not a head.
const parkedBehind = "parked"

// poisonSeen is what the run did with poison records. Under world.mu.
type poisonSeen struct {
	on   bool
	recs map[pos]poisonRec // by position, once produced
	// parkHeads: records whose parked copy made them the head of a
	// parking (class other than parkedBehind), with the class; givenUp,
	// records whose dead letter a receiver gave up on; atSink, positions
	// of requests the sink's server could not read.
	parkHeads map[pos]string
	givenUp   map[pos]bool
	atSink    map[pos]int
}

func newPoisonSeen() poisonSeen {
	return poisonSeen{recs: map[pos]poisonRec{}, parkHeads: map[pos]string{}, givenUp: map[pos]bool{}, atSink: map[pos]int{}}
}

// withPoison adds the poison records of batch b to recs (at positions
// drawn from the seed, never from the producer's rng), and returns them
// and the poison records among them.
func (w *world) withPoison(b int, recs []*kgo.Record, keys int) ([]*kgo.Record, map[*kgo.Record]poisonRec) {
	n := int(mix(w.seed, 82, uint64(b)) % 3)
	out := make(map[*kgo.Record]poisonRec, n)
	for i := range n {
		h := mix(w.seed, 82, uint64(b), uint64(i))
		kind := poisonKeyless
		if w.versionCheck {
			kind = poisonKind(h % uint64(numPoisonKinds))
		}
		k := int(h >> 8 % uint64(keys))
		pr := poisonRec{kind: kind, n: 2*b + i}
		rec := &kgo.Record{Topic: topic, Partition: int32(k) % w.parts, Value: pr.value(k, keys, h>>40)}
		if kind == poisonKeyless {
			rec.Partition = int32(h >> 24 % uint64(w.parts))
		} else {
			pr.key = "agg-" + strconv.Itoa(k)
			rec.Key = []byte(pr.key)
		}
		out[rec] = pr
		recs = slices.Insert(recs, int(h>>48%uint64(len(recs)+1)), rec)
	}
	return recs, out
}

// value is the poison record's value, for aggregate k of keys (the one
// it claims to be of); h varies it. Its id is never key/seq, so that
// parseValue reads none as a message of the simulation.
func (pr poisonRec) value(k, keys int, h uint64) []byte {
	agg, aggType := "agg-"+strconv.Itoa(k), "item"
	switch pr.kind {
	case poisonKeyless:
		if h%2 == 0 {
			return []byte("poison-" + strconv.Itoa(pr.n)) // raw, or no Wow message either
		}
	case poisonUndecodable:
		if h%2 == 0 {
			return fmt.Appendf(nil, "poison-%d: not a Wow message", pr.n)
		}
		// An event stream cut short.
		return fmt.Appendf(nil, `{"id":"poison-%d","contextName":"sim","aggregateName":"item","aggregateId":%q,"version":`, pr.n, agg)
	case poisonMismatch:
		agg = "agg-" + strconv.Itoa((k+1+int(h%uint64(keys-1)))%keys) // another aggregate's
	case poisonForeign:
		aggType = "other" // another aggregate type's: not this topic's
	}
	return fmt.Appendf(nil, `{"id":"poison-%d","contextName":"sim","aggregateName":%q,"aggregateId":%q,"version":1,"body":[{"name":"item_changed","body":{}}]}`,
		pr.n, aggType, agg)
}

// poisonProducedLocked registers the poison record pr produced at at: a
// dead letter of it already acknowledged (or given up) settles it now.
func (w *world) poisonProducedLocked(at pos, pr poisonRec) {
	w.ends[at.p] = max(w.ends[at.p], at.o+1)
	w.poi.recs[at] = pr
	if w.stubPending[at] {
		delete(w.stubPending, at)
		w.unresolvedStubs--
		w.finishLocked(at)
		w.settled[at] = true
	}
}

// poisonAckedLocked records a write of the poison record at to the
// dead-letter or parked topic that the brokers acknowledged, and reports
// whether at is a poison record (registered).
func (w *world) poisonAckedLocked(r *kgo.Record, at pos) bool {
	if _, ok := w.poi.recs[at]; !ok {
		return false
	}
	if isStub(r) {
		w.stubs++
	}
	if r.Topic == parkedTopic {
		w.parked[at]++
		w.finishLocked(at) // committable; settled by the dead letter the redrive or a discard writes
		return true
	}
	w.deadLetter[at]++
	w.finishLocked(at)
	w.settled[at] = true
	return true
}

// poisonGivenUpLocked settles the poison record at, whose dead letter a
// receiver gave up on, and reports whether at is one (registered).
func (w *world) poisonGivenUpLocked(at pos) bool {
	if _, ok := w.poi.recs[at]; !ok {
		return false
	}
	w.finishLocked(at)
	w.settled[at] = true
	return true
}

// isStub reports whether r is a dead letter written without its value.
func isStub(r *kgo.Record) bool {
	return slices.ContainsFunc(r.Headers, func(h kgo.RecordHeader) bool { return h.Key == receiver.HeaderValueOmitted })
}

// poisonAtSinkLocked records a request the sink's server could not read,
// for the record at.
func (w *world) poisonAtSinkLocked(at pos) { w.poi.atSink[at]++ }

// checkPoisonLocked checks what became of every poison record (see the
// top of the file), and each member's count of unroutable records.
func (w *world) checkPoisonLocked(members []*member) {
	type fate struct {
		classes    []string // of the receiver's dead letters of it
		fromParked int      // dead letters written from a parking
	}
	fates := map[pos]*fate{}
	acks := map[int]int{}              // per member: dead letters of poison records acknowledged from its receiver
	distinct := map[int]map[pos]bool{} // and of how many records
	for _, d := range w.pr.deadLetters {
		if _, ok := w.poi.recs[d.at]; !ok {
			continue
		}
		f := fates[d.at]
		if f == nil {
			f = &fate{}
			fates[d.at] = f
		}
		if d.parked {
			f.fromParked++
			continue
		}
		f.classes = append(f.classes, d.class)
		acks[d.member]++
		if distinct[d.member] == nil {
			distinct[d.member] = map[pos]bool{}
		}
		distinct[d.member][d.at] = true
	}
	// Up to 3 reports of each kind of violation, and their number in all.
	bad, shown := 0, map[string]int{}
	report := func(format string, args ...any) {
		bad++
		if shown[format]++; shown[format] <= 3 {
			w.violateLocked(format, args...)
		}
	}
	for _, at := range slices.SortedFunc(maps.Keys(w.poi.recs), comparePos) {
		pr := w.poi.recs[at]
		if n := w.attempts[at]; n > 0 {
			to := w.deliveredTo[at]
			report("the %s at %v was handed to the handler %d times (members %v): no handler may get a record it cannot route", pr, at, n, to[:min(len(to), 10)])
		}
		if n := w.poi.atSink[at]; n > 0 {
			report("the %s at %v reached the sink's server in %d requests", pr, at, n)
		}
		if class, ok := w.poi.parkHeads[at]; ok {
			report("the %s at %v parked its aggregate (a parked copy of class %q, not %q): it has no aggregate to hold, and must be dead-lettered", pr, at, class, parkedBehind)
		}
		f := fates[at]
		if f == nil {
			f = &fate{}
		}
		if !slices.Contains(f.classes, pr.kind.class()) && f.fromParked == 0 && !w.poi.givenUp[at] {
			report("the %s at %v was never dead-lettered with class %q (its dead letters' classes %q, %d written from a parking), nor given up: %s",
				pr, at, pr.kind.class(), f.classes, f.fromParked, w.historyLocked(at))
		}
	}
	for _, q := range w.pr.requests {
		if pr, ok := w.poi.recs[q.head]; ok && q.failed {
			report("aggregate %s was parked with the %s at %v at its failed head (the operator read it at %.3fs): it has no aggregate to hold",
				q.key, pr, q.head, q.at.Sub(start).Seconds())
		}
	}
	if bad > len(shown) {
		w.violateLocked("%d violations about poison records in all", bad)
	}
	for _, m := range members {
		if got := m.counter("wowd_messages_total", "outcome", "unroutable"); int(got) != acks[m.id] {
			w.violateLocked("member %d counted %v messages unroutable (wowd_messages_total), but the brokers acknowledged %d dead letters of poison records (of %d records) from its receiver, and no other record is unroutable",
				m.id, got, acks[m.id], len(distinct[m.id]))
		}
	}
}

func comparePos(a, b pos) int { return cmp.Or(cmp.Compare(a.p, b.p), cmp.Compare(a.o, b.o)) }

// poisonSummaryLocked is the poison records' part of a run's summary.
func (w *world) poisonSummaryLocked() string {
	if !w.poi.on {
		return "poison records: none"
	}
	var kinds [numPoisonKinds]int
	dl, parked, givenUp := 0, 0, 0
	for at, pr := range w.poi.recs {
		kinds[pr.kind]++
		dl += w.deadLetter[at]
		if w.parked[at] > 0 {
			parked++
		}
		if w.poi.givenUp[at] {
			givenUp++
		}
	}
	var ks []string
	for k, n := range kinds {
		if n > 0 {
			ks = append(ks, fmt.Sprintf("%d %s", n, poisonNames[k]))
		}
	}
	return fmt.Sprintf("poison records: %d (%s), %d dead letters of them, %d parked behind their key, %d given up",
		len(w.poi.recs), strings.Join(ks, ", "), dl, parked, givenUp)
}

// TestPoisonValues: each kind of poison record is what its name says to
// the receivers' Wow check (the class it must be dead-lettered with), and
// its value never reads as a message of the simulation.
func TestPoisonValues(t *testing.T) {
	const keys = 20
	for n := range 64 {
		h := mix(uint64(n), 1)
		for kind := range numPoisonKinds {
			k := int(h % keys)
			pr := poisonRec{kind: kind, n: n}
			key := []byte("agg-" + strconv.Itoa(k))
			if kind == poisonKeyless {
				key = nil
			}
			v := pr.value(k, keys, h>>40)
			if got, seq, ok := parseValue(v); ok {
				t.Errorf("%v: value %q reads as %s #%d", pr, v, got, seq)
			}
			var m wow.Message
			class := "none"
			switch {
			case len(key) == 0:
				class = "unroutable"
			case m.Decode(handler.KindEvent, v) != nil:
				class = "undecodable"
			case m.Check(key, "sim", "item") != nil:
				class = "mismatch"
			}
			if class != kind.class() {
				t.Errorf("%v: value %q is %s to the receivers, want %s", pr, v, class, kind.class())
			}
		}
	}
}
