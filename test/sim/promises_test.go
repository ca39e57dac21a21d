package sim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/wowd/wowd/internal/park"
	"github.com/wowd/wowd/internal/receiver"
)

// This file holds the invariants that judge wowd's promises by what the
// simulation itself saw, never by what wowd says it did:
//
//   - a dead letter given up (the receiver logs it and commits past the
//     record) only after its writes were refused deadLetterAttempts times
//     (the members' clients report each refusal, with the error the brokers
//     answered, see deadLetterHook); and, so that the path runs at all, now
//     and then the brokers refuse a failed message's dead letter for good
//     (doom);
//   - every dead letter justified: one written by the receiver (wowd-dlq-*
//     headers) only after a try of its record failed (a failure the
//     handler chose, or a try that outlived its deadline); one written from
//     a parking (wowd-parked-* headers) only for a discard of its aggregate
//     asked on that parking, or a skip asked with that record at the head
//     (recorded as the operator asks: see noteRequest); one of a poison
//     record's only with its own class (poison_test.go);
//   - a revoke commits the finished prefix of the revoked partitions: the
//     records the member's tries finished in its incarnation of the
//     partition (from its assignment), from the last offset it committed
//     there, must be below its commits once it logs the revoke, unless its
//     last commit failed or went unanswered, or it was cut off since it
//     sent it, or it stops or crashed;
//   - within one member's incarnation of a partition, an aggregate's
//     deliveries never go back in its sequence.

// deadLetterAttempts is the receiver's bound on refused writes of one dead
// letter (internal/receiver/deadletter.go): it gives up after that many.
const deadLetterAttempts = 8

// triedLate: a try acknowledged this long or more after it began may have
// passed its deadline, whose watcher then took its outcome (a transient
// failure): with a margin for the time between the receiver's try clock
// and the handler's call (the blocking pool, WithRetry's backoffs).
const triedLate = handlerTimeout - 500*time.Millisecond

// promises is what those invariants keep; under world.mu.
type promises struct {
	// dlRefusals are the refusals of dead-letter writes scheduled: the next
	// requests carrying dead letters are refused with err, left of them
	// (one at a time, in order).
	dlRefusals []dlRefusal
	// doomNext: the next dead letter of a failed message written is
	// refused for good (doomed): every write carrying it.
	doomNext bool
	doomed   map[pos]bool
	dooms    int
	// brokerRefused counts, per source record, its dead letters in write
	// requests the brokers refused; clientRefused, the refusals of its
	// dead-letter writes the members' clients reported (a refused batch
	// fails every record the client buffered for that partition too).
	brokerRefused map[pos]int
	clientRefused map[pos]int
	givenUp       int

	// requests are the operator's requests, as asked.
	requests []opRequest
	// deadLetters are the dead letters the brokers acknowledged to the
	// members, in the order acknowledged.
	deadLetters []dlAck
	// failedTry: the earliest start of a try of the record that failed
	// (or may have outlived its deadline).
	failedTry map[pos]time.Time
	// parkedSince: the parkings (their wowd-parked-since) in which a
	// parked copy of the record was acknowledged.
	parkedSince map[pos][]time.Time

	// incs are the members' incarnations of the partitions they own, by
	// member, then partition; drainCut, when a member's revoke drain ran
	// out of time (its unfinished records dropped).
	incs     map[int]map[int32]*incarnation
	drainCut map[int]time.Time
	// revokes counts the revokes checked, and those let off for a commit
	// that failed or went unanswered.
	revokes, revokesLetOff int
}

type dlRefusal struct {
	err  *kerr.Error
	left int
}

// opRequest is an operator's request as asked: on the state it read.
type opRequest struct {
	action string
	key    string
	since  time.Time // the parking it was asked on (ms)
	head   pos       // the source record at the head, when it failed
	failed bool      // the head failed: a skip dead-letters it
	at     time.Time
}

// dlAck is a dead letter the brokers acknowledged.
type dlAck struct {
	at     pos
	parked bool      // written from a parking (wowd-parked-* headers)
	since  time.Time // its parking's, when parked
	class  string    // the receiver's wowd-dlq-error-class
	member int
	when   time.Time
}

// incarnation is a member's ownership of a partition, from its assignment
// to its revoke or loss (as its receiver logs them).
type incarnation struct {
	start time.Time
	// committed is the highest offset the member committed for the
	// partition since the incarnation began, with an answer without error.
	committed int64
	// finished: offsets its tries handled or skipped (acknowledged in
	// time, never parked), with when.
	finished map[int64]time.Time
	// last: per aggregate, the highest sequence number delivered.
	last map[string]int
	// tainted: the client rewound the partition, and the receiver began a
	// new incarnation without a log of its start: no judgement.
	tainted bool
}

func newPromises() promises {
	return promises{
		doomed:        map[pos]bool{},
		brokerRefused: map[pos]int{},
		clientRefused: map[pos]int{},
		failedTry:     map[pos]time.Time{},
		parkedSince:   map[pos][]time.Time{},
		incs:          map[int]map[int32]*incarnation{},
		drainCut:      map[int]time.Time{},
	}
}

// --- dead letters refused, given up -----------------------------------------

// refuseDeadLetters refuses the next n write requests carrying dead letters
// with err (as kfake's faults would, counting requests).
func (w *world) refuseDeadLetters(n int, err *kerr.Error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pr.dlRefusals = append(w.pr.dlRefusals, dlRefusal{err, n})
}

// doomNextDeadLetter refuses the next dead letter of a failed message for
// good.
func (w *world) doomNextDeadLetter() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pr.doomNext = true
}

// calmDeadLetters ends the refusals scheduled; doomed dead letters stay
// refused.
func (w *world) calmDeadLetters() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pr.dlRefusals, w.pr.doomNext = nil, false
}

// dlRecord is a dead letter in a write request.
type dlRecord struct {
	at       pos
	receiver bool // the receiver's (wowd-dlq-*), not a parked message's
}

var dlDecompressor = kgo.DefaultDecompressor()

// deadLetterSources returns the dead letters of one partition's records in
// a write request.
func deadLetterSources(raw []byte) []dlRecord {
	var b kmsg.RecordBatch
	if err := b.ReadFrom(raw); err != nil {
		return nil
	}
	data := b.Records
	if codec := kgo.CompressionCodecType(b.Attributes & 0x7); codec != kgo.CodecNone {
		d, err := dlDecompressor.Decompress(data, codec)
		if err != nil {
			return nil
		}
		data = d
	}
	var out []dlRecord
	for i := int32(0); i < b.NumRecords && len(data) > 0; i++ {
		l, n := binary.Varint(data)
		if n <= 0 || l < 0 || n+int(l) > len(data) {
			break
		}
		var r kmsg.Record
		if err := r.ReadFrom(data[:n+int(l)]); err != nil {
			break
		}
		data = data[n+int(l):]
		var d dlRecord
		for _, h := range r.Headers {
			switch h.Key {
			case receiver.HeaderSourcePartition, park.HeaderSourcePartition:
				p, _ := strconv.Atoi(string(h.Value))
				d.at.p = int32(p)
			case receiver.HeaderSourceOffset, park.HeaderSourceOffset:
				d.at.o, _ = strconv.ParseInt(string(h.Value), 10, 64)
			}
			d.receiver = d.receiver || h.Key == receiver.HeaderSourceOffset
		}
		out = append(out, d)
	}
	return out
}

// judgeDeadLetterWrite decides, for a write request the brokers received,
// which of its dead-letter partitions are refused: all of them while
// refusals are scheduled (one request at a time), else those carrying a
// doomed dead letter (the next dead letter of a failed message is doomed
// when doomNext is set). It counts the refused dead letters per source
// record and makes the brokers answer so (kfake faults on this very
// request). Called from the brokers' produce control.
func (w *world) judgeDeadLetterWrite(kr kmsg.Request) {
	req := kr.(*kmsg.ProduceRequest)
	type part struct {
		p    int32
		recs []dlRecord
	}
	var parts []part
	for _, t := range req.Topics {
		if t.Topic != dlqTopic && (t.TopicID == [16]byte{} || t.TopicID != w.dlqID) {
			continue
		}
		for _, p := range t.Partitions {
			parts = append(parts, part{p.Partition, deadLetterSources(p.Records)})
		}
	}
	if len(parts) == 0 {
		return
	}
	w.mu.Lock()
	var all *kerr.Error
	for len(w.pr.dlRefusals) > 0 && all == nil {
		r := &w.pr.dlRefusals[0]
		all = r.err
		if r.left--; r.left <= 0 {
			w.pr.dlRefusals = w.pr.dlRefusals[1:]
		}
	}
	refused := map[*kerr.Error][]int32{}
	for _, pt := range parts {
		err := all
		for _, d := range pt.recs {
			if err != nil {
				break
			}
			if !d.receiver || d.at.p < 0 {
				continue
			}
			if w.pr.doomNext && !w.pr.doomed[d.at] {
				w.pr.doomNext = false
				w.pr.doomed[d.at] = true
				w.pr.dooms++
				w.eventLocked("the dead letter of partition %d offset %d is refused for good", d.at.p, d.at.o)
			}
			if w.pr.doomed[d.at] {
				err = kerr.TopicAuthorizationFailed
			}
		}
		if err == nil {
			continue
		}
		refused[err] = append(refused[err], pt.p)
		for _, d := range pt.recs {
			if d.receiver {
				w.pr.brokerRefused[d.at]++
			}
		}
	}
	w.mu.Unlock()
	for err, ps := range refused {
		w.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: dlqTopic, Partitions: ps, Err: err, Count: 1,
			When: func(r kmsg.Request) bool { return r == kr }})
	}
}

// deadLetterRefused counts a refusal of a receiver's dead-letter write
// that a member's client reported, with an error the brokers answered
// (and only those the simulation makes them answer: refused, or too large
// for a stub, which the receiver counts as attempts).
func (w *world) deadLetterRefusedLocked(r *kgo.Record, at pos, err error) {
	stub := r.Value == nil && slices.ContainsFunc(r.Headers, func(h kgo.RecordHeader) bool { return h.Key == receiver.HeaderValueOmitted })
	if errors.Is(err, kerr.TopicAuthorizationFailed) || stub && errors.Is(err, kerr.MessageTooLarge) {
		w.pr.clientRefused[at]++
	}
}

// checkGivenUpLocked judges a dead letter given up, as member logged it:
// its writes must have been refused deadLetterAttempts times.
func (w *world) checkGivenUpLocked(member int, at pos) {
	w.pr.givenUp++
	if n := w.pr.clientRefused[at]; n < deadLetterAttempts {
		w.violateLocked("member %d gave up on the dead letter of partition %d offset %d (%q), but its client reported %d refusals of its writes (the brokers refused %d requests carrying it), and the receiver gives up only after %d",
			member, at.p, at.o, givenUpMessage, n, w.pr.brokerRefused[at], deadLetterAttempts)
	}
}

// --- dead letters justified -------------------------------------------------

// sinceOf reads a wowd-parked-since header (RFC 3339, milliseconds).
func sinceOf(hs []kgo.RecordHeader) (time.Time, bool) {
	for _, h := range hs {
		if h.Key == park.HeaderSince {
			t, err := time.Parse(time.RFC3339Nano, string(h.Value))
			return t.UTC(), err == nil
		}
	}
	return time.Time{}, false
}

func headerOf(hs []kgo.RecordHeader, key string) string {
	for _, h := range hs {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// acknowledgedLocked records a write to the dead-letter or parked topic
// that the brokers acknowledged to member.
func (w *world) acknowledgedLocked(member int, r *kgo.Record, at pos) {
	switch r.Topic {
	case parkedTopic:
		if since, ok := sinceOf(r.Headers); ok && !slices.ContainsFunc(w.pr.parkedSince[at], since.Equal) {
			w.pr.parkedSince[at] = append(w.pr.parkedSince[at], since)
		}
		if class := headerOf(r.Headers, park.HeaderClass); class != parkedBehind {
			w.poi.parkHeads[at] = class // the head of a parking: judged for poison records (checkPoisonLocked)
		}
	case dlqTopic:
		d := dlAck{at: at, member: member, when: time.Now(), class: headerOf(r.Headers, receiver.HeaderErrorClass)}
		if headerOf(r.Headers, park.HeaderSourceOffset) != "" {
			d.parked = true
			var ok bool
			if d.since, ok = sinceOf(r.Headers); !ok {
				w.violateLocked("member %d: the dead letter of parked partition %d offset %d has no readable %s", member, at.p, at.o, park.HeaderSince)
			}
		}
		w.pr.deadLetters = append(w.pr.deadLetters, d)
	}
}

// tryFailedLocked records a try of at, begun at called, that failed.
func (w *world) tryFailedLocked(at pos, called time.Time) {
	if t, ok := w.pr.failedTry[at]; !ok || called.Before(t) {
		w.pr.failedTry[at] = called
	}
}

func (w *world) tryFailed(at pos, called time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tryFailedLocked(at, called)
}

// noteRequest records an operator's request as it is asked, on the state s.
func (w *world) noteRequest(action string, s *park.State) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pr.requests = append(w.pr.requests, opRequest{
		action: action, key: s.Aggregate, since: s.Since.UTC().Truncate(time.Millisecond),
		head: pos{s.Partition, s.Offset}, failed: s.HeadFailed(), at: time.Now(),
	})
}

// checkDeadLettersLocked checks every dead letter the brokers acknowledged
// against what the simulation saw: one of the receiver's follows a try of
// its record that failed; one of a parked record follows a parking of it
// and a discard of its aggregate asked on that parking, or a skip asked
// there with it at the head. (A redrive dead-letters nothing: a redriven
// message that fails again stays parked.)
func (w *world) checkDeadLettersLocked() {
	bad := 0
	for _, d := range w.pr.deadLetters {
		if d.at.p < 0 {
			continue
		}
		ks, known := w.keyOf[d.at]
		pr, poison := w.poi.recs[d.at]
		if poison && !d.parked {
			// Dead-lettered as it came, or as a redrive screened it: only
			// with its own class, never a handler failure's.
			if d.class == pr.kind.class() {
				continue
			}
			if bad++; bad <= 5 {
				w.violateLocked("member %d dead-lettered the %s at %v with class %q at %.3fs, want %q: %s",
					d.member, pr, d.at, d.class, d.when.Sub(start).Seconds(), pr.kind.class(), w.historyLocked(d.at))
			}
			continue
		}
		if !d.parked {
			if t, ok := w.pr.failedTry[d.at]; ok && !t.After(d.when) {
				continue
			}
			if bad++; bad <= 5 {
				w.violateLocked("member %d dead-lettered partition %d offset %d (%s #%d, class %q) at %.3fs, but no try of it had failed: %s",
					d.member, d.at.p, d.at.o, ks.key, ks.seq, d.class, d.when.Sub(start).Seconds(), w.historyLocked(d.at))
			}
			continue
		}
		key := ks.key
		switch {
		case poison:
			key = pr.key // parked behind its key's aggregate
		case !known:
			key = "?"
		}
		parkedThen := slices.ContainsFunc(w.pr.parkedSince[d.at], d.since.Equal)
		var asked []string
		justified := false
		for _, q := range w.pr.requests {
			if q.key != key || q.at.After(d.when) {
				continue
			}
			asked = append(asked, fmt.Sprintf("%s at %.3fs on the parking since %s (head %d/%d, failed %v)", q.action, q.at.Sub(start).Seconds(), q.since.Format("15:04:05.000"), q.head.p, q.head.o, q.failed))
			if !q.since.Equal(d.since) {
				continue
			}
			justified = justified || q.action == park.Discard || q.action == park.Skip && q.failed && q.head == d.at
		}
		if parkedThen && justified {
			continue
		}
		if bad++; bad <= 5 {
			why := "no discard of its aggregate nor skip with it at the head was asked on that parking"
			if !parkedThen {
				why = "no parked copy of it was acknowledged in that parking"
			}
			w.violateLocked("member %d dead-lettered parked partition %d offset %d (%s #%d, parked since %s) at %.3fs, but %s; the operator asked: %s",
				d.member, d.at.p, d.at.o, key, ks.seq, d.since.Format("15:04:05.000"), d.when.Sub(start).Seconds(), why, strings.Join(first(asked, 8), "; "))
		}
	}
	if bad > 5 {
		w.violateLocked("%d dead letters without a cause in all", bad)
	}
}

// --- incarnations: revokes commit, deliveries in order ----------------------

// assignedLocked begins member's incarnations of the partitions.
func (w *world) assignedLocked(member int, parts []int32) {
	if w.pr.incs[member] == nil {
		w.pr.incs[member] = map[int32]*incarnation{}
	}
	for _, p := range parts {
		w.pr.incs[member][p] = &incarnation{start: time.Now(), committed: -1, finished: map[int64]time.Time{},
			last: map[string]int{}}
	}
}

// endedLocked ends member's incarnations of the partitions (lost, taken
// again) and returns them.
func (w *world) endedLocked(member int, parts []int32) []*incarnation {
	var out []*incarnation
	for _, p := range parts {
		out = append(out, w.pr.incs[member][p])
		delete(w.pr.incs[member], p)
	}
	return out
}

// incarnationLocked returns member's current incarnation of p, or nil.
func (w *world) incarnationLocked(member int, p int32) *incarnation {
	if p < 0 {
		return nil
	}
	return w.pr.incs[member][p]
}

// deliveredInLocked checks a delivery of key's #seq at at in member's
// incarnation inc: never below one delivered before in it.
//
// An action that unparked an aggregate leaves its records fetched again
// from the partition below what it resolved passed over (seeds 3, 7, 20
// and 4676 saw them handed over again after the later ones the redrive
// had handed over, before the receiver kept the floor: partition.unparked).
func (w *world) deliveredInLocked(member int, inc *incarnation, at pos, key string, seq int) {
	if inc == nil || inc.tainted {
		return
	}
	if last, ok := inc.last[key]; ok && seq < last {
		w.violateLocked("aggregate %s: member %d delivered #%d (partition %d offset %d) after #%d within one ownership of the partition (since %.3fs): %s",
			key, member, seq, at.p, at.o, last, inc.start.Sub(start).Seconds(), w.historyLocked(at))
	}
	inc.last[key] = max(inc.last[key], seq)
}

// finishedInLocked records the record at, handled or skipped by a try of
// inc begun at called, as finished there: unless it came late (its
// deadline may have passed) or the record was parked (a redrive's try is
// not the partition's).
func (w *world) finishedInLocked(inc *incarnation, at pos, called time.Time) {
	if inc == nil || at.p < 0 || w.parked[at] > 0 || time.Since(called) >= triedLate {
		return
	}
	if _, ok := inc.finished[at.o]; !ok {
		inc.finished[at.o] = time.Now()
	}
}

// committedBy records the offsets member committed with an answer without
// error, by a request written at at.
func (w *world) committedBy(member int, at time.Time, offsets map[int32]int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for p, o := range offsets {
		if inc := w.pr.incs[member][p]; inc != nil && at.After(inc.start) {
			inc.committed = max(inc.committed, o)
		}
	}
}

// revokedLocked judges member's revoke of the partitions, as its receiver
// logs it once it let them go: its commits must have reached what its
// tries finished in the incarnation, from its last commit there on (what
// finished after its drain ran out of time was dropped). Unless its last
// commit request failed or was not answered (the commit failed: fenced, a
// rebalance, a stall, a cut), or the member was cut off since it was
// written (a commit tried meanwhile may never have been written), or it
// stops or crashed (the stop commits).
func (w *world) revokedLocked(m *member, parts []int32, lastOK bool) {
	cut, cutShort := w.pr.drainCut[m.id]
	delete(w.pr.drainCut, m.id)
	for _, p := range parts {
		inc := w.pr.incs[m.id][p]
		delete(w.pr.incs[m.id], p)
		if inc == nil || inc.tainted || inc.committed < 0 || m.stopping.Load() || m.crashed.Load() {
			continue
		}
		w.pr.revokes++
		if !lastOK {
			w.pr.revokesLetOff++
			continue
		}
		reached := inc.committed
		for {
			t, ok := inc.finished[reached]
			if !ok || cutShort && !t.Before(cut) {
				break
			}
			reached++
		}
		if reached > inc.committed {
			log := w.commitLog[p][max(0, len(w.commitLog[p])-8):]
			w.violateLocked("member %d: partition %d revoked with its commits at %d, but its tries had finished every record from there up to %d (owned since %.3fs); last commits of the partition: %s",
				m.id, p, inc.committed, reached, inc.start.Sub(start).Seconds(), strings.Join(log, ", "))
		}
	}
}

// promisesSummaryLocked is the run's summary of these invariants.
func (w *world) promisesSummaryLocked() string {
	broker, client, parked := 0, 0, 0
	for _, n := range w.pr.brokerRefused {
		broker += n
	}
	for _, n := range w.pr.clientRefused {
		client += n
	}
	for _, d := range w.pr.deadLetters {
		if d.parked {
			parked++
		}
	}
	s := fmt.Sprintf("dead letters: %d refused at the brokers (%d refusals reported by the clients), %d doomed, %d given up; %d judged (%d from parkings), %d operator requests; revokes: %d judged (%d let off for a failed commit)",
		broker, client, w.pr.dooms, w.pr.givenUp, len(w.pr.deadLetters), parked, len(w.pr.requests), w.pr.revokes, w.pr.revokesLetOff)
	return s
}
