package receiver

import (
	"fmt"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/wowd/wowd/internal/metrics"
)

// The Wow version check (Options.VersionCheck): each event stream carries
// its aggregate's version, one more than the previous event's. The receiver
// keeps the last version handled per aggregate while the aggregate is
// active, and checks each event stream in its mailbox's order: one not
// above the last is a duplicate (a producer's retry, a replay), skipped;
// one past the next is a gap, logged and counted, and with OnGapPark the
// aggregate parks at it.
//
// "While active": the table holds at most versionsPerWindow entries per
// slot of the window; past that an arbitrary entry goes, and that
// aggregate's next version is taken as it comes.
//
// A local (ingested) record is checked too, against the same table; one
// at a gap with OnGapPark is given up to the owner of its partition
// (gapGiveUp). The owner learns the versions of copies other instances
// handled locally as it skips them (copyVersion).

// An entry is trusted only by the incarnation of the partition that
// learnt it (see versionEntry.validFor): a partition's owner sees all of
// its aggregates' messages only while it owns it. Once it is revoked or
// lost, another member may handle more of them; when it comes back, the
// version learnt before would make the next one a false gap (and, with
// on-gap park, park the aggregate when nothing is missing). A handler of
// an incarnation that closed and finished late teaches nothing.
//
// A local record's version is trusted by the owner's incarnation only if
// it is anchored: checked against a version the owner's incarnation
// learnt (directly, or through anchored local records), and next to it.
// One taken as it comes (no entry it could trust) or past a gap may be
// ahead of versions still on their way through Kafka, which the owner
// would then skip as duplicates though nobody handled them: a message
// lost, where a false gap only parks.

// versionsPerWindow bounds the version table: entries per window slot.
const versionsPerWindow = 4

// versions is the table of last handled versions.
type versions struct {
	mu   sync.Mutex // guards last
	last map[parkKey]versionEntry
	max  int
}

// versionEntry is the last version handled of an aggregate, and where.
type versionEntry struct {
	n int64
	// p is the incarnation of the record that taught n: a partition's, or
	// the local pseudo-partition of the ingest's records.
	p *partition
	// clock is incarnations' value when n was anchored (anchorClock): for
	// a local record, when it was checked next to an owner's version (at
	// least that incarnation's opening), or the clock of the local record
	// it followed; not when its handler finished, which may be after a
	// rebalance. A local record's version
	// is news to an incarnation opened before that, not to one opened
	// after (that one's owner may have missed the messages another member
	// handled in between).
	clock uint64
	// anchored: a local record's n followed a version its partition's
	// owner learnt, with nothing missing in between (always true of a
	// partition's own entries).
	anchored bool
}

// incarnations counts the partition incarnations made in the process
// (partition.opened); versions read it to order what they learn against
// the incarnations that may trust it.
var incarnations atomic.Uint64

// versionScope is the incarnation whose versions a record of q learns and
// trusts: a redriven message's is its partition's.
func versionScope(q *partition) *partition {
	if q.of != nil {
		return q.of
	}
	return q
}

// validFor reports whether a record of incarnation q (a versionScope) may
// take e for its aggregate's last handled version.
func (e versionEntry) validFor(q *partition) bool {
	switch {
	case e.p == q:
		return true
	case q.partition < 0: // a local record: what any open incarnation, or another local record, learnt
		return e.p.partition < 0 || !e.p.isClosed()
	default: // a partition's record: an anchored local record handled while it was open
		return e.p.partition < 0 && e.anchored && e.clock >= q.opened
	}
}

func newVersions(window int) *versions {
	return &versions{last: make(map[parkKey]versionEntry), max: versionsPerWindow * window}
}

// entry returns k's entry if a record of incarnation q may trust it.
func (v *versions) entry(k parkKey, q *partition) (versionEntry, bool) {
	q = versionScope(q)
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.last[k]
	if !ok || !e.validFor(q) {
		return versionEntry{}, false
	}
	return e, true
}

// anchorClock is the clock of a local record checked next to e at now
// (incarnations' value read before e): e's own where e is a local
// record's (the chain's anchor), now where e is an open incarnation's, or
// that incarnation's opening where it opened after now (between the read
// and the look-up): the incarnation the record follows must trust it.
func (e versionEntry) anchorClock(now uint64) uint64 {
	if e.p.partition < 0 {
		return min(e.clock, now)
	}
	return max(now, e.p.opened)
}

// handled records version n of k as handled by a record of incarnation q;
// anchored tells, for a local record, whether it was checked next to an
// anchored version (see versionEntry.anchored). What a closed
// incarnation's late handler finished is not recorded.
func (v *versions) handled(k parkKey, n int64, q *partition, anchored bool) {
	v.handledAt(k, n, q, anchored, incarnations.Load())
}

// handledAt is handled with the entry's clock given: for an anchored local
// record, its anchor's (see versionEntry.clock).
func (v *versions) handledAt(k parkKey, n int64, q *partition, anchored bool, clock uint64) {
	q = versionScope(q)
	if q.isClosed() {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.last[k]
	if !ok && len(v.last) >= v.max {
		for old := range v.last { // an arbitrary entry: Go's map order
			delete(v.last, old)
			break
		}
	}
	if ok && e.validFor(q) && e.n >= n {
		return
	}
	if ok && q.partition >= 0 && e.p.partition < 0 && e.n > n {
		// A partition's record does not lower what local records go on
		// trusting: their own chain, which the partition does not trust
		// (unanchored), is ahead of it. The owner reading the marked
		// copies of its own ingested messages late would otherwise set
		// the aggregate back, and the next ingested version would be a
		// false gap. The partition learns again once it catches up.
		return
	}
	v.last[k] = versionEntry{n: n, p: q, clock: clock, anchored: q.partition >= 0 || anchored}
}

// forget drops k's version: its history has a hole on purpose (a parked
// message skipped or discarded).
func (v *versions) forget(k parkKey) {
	v.mu.Lock()
	delete(v.last, k)
	v.mu.Unlock()
}

// checkVersion checks the job's event stream, of version n, against its
// aggregate's last handled version. It reports whether the job goes on to
// the handler; if not, the job was finished (a duplicate) or parked.
func (j *job) checkVersion(n int64) bool {
	r := j.r
	k := parkKey{j.rec.Topic, j.msg.AggregateID}
	// Read before the entry: an incarnation opened after this check may
	// not trust what the record anchors to here.
	now := incarnations.Load()
	e, ok := r.versions.entry(k, j.p)
	last := e.n
	j.version, j.versionClock = n, now
	switch {
	case !ok:
		return true
	case n == last+1:
		j.versionAnchored, j.versionClock = e.anchored, e.anchorClock(now)
		return true
	case n <= last:
		r.m.VersionDuplicate()
		r.log.Debug("event stream version already handled; skipped as a duplicate",
			zap.String("topic", j.rec.Topic), zap.Int32("partition", j.rec.Partition), zap.Int64("offset", j.rec.Offset),
			zap.String("aggregate", k.key), zap.Int64("version", n), zap.Int64("last_handled", last))
		j.finish(metrics.Skipped)
		return false
	}
	r.m.VersionGap()
	at := []zap.Field{zap.String("topic", j.rec.Topic), zap.Int32("partition", j.rec.Partition), zap.Int64("offset", j.rec.Offset),
		zap.String("aggregate", k.key), zap.Int64("version", n), zap.Int64("last_handled", last)}
	if r.o.OnGapPark && r.park != nil && j.p == r.local && !j.redriven {
		j.gapGiveUp(k, last)
		return false
	}
	if r.o.OnGapPark && r.park != nil && !j.decided {
		j.failure = failure{class: "version-gap", reason: fmt.Sprintf("version %d after %d: %d missing", n, last, n-last-1)}
		if j.redriven {
			// Behind the head the operator decided about: the action
			// keeps the aggregate parked with this at its head, as for a
			// message that fails again.
			r.log.Warn("event stream version gap in a redrive: the aggregate stays parked at it", at...)
			j.local.fail = j.failure
			j.finish(metrics.Parked)
			return false
		}
		r.log.Warn("event stream version gap: parking the aggregate at it", at...)
		j.park()
		return false
	}
	r.log.Warn("event stream version gap: handled anyway", at...)
	return true
}

// gapGiveUp gives up a local (ingested) record at a version gap, with
// on-gap park: it has no position in Kafka to park at, and handled here its
// copy would be published as handled and the gap never parked. Given up
// like one that failed for good (job.conclude), its copy, unmarked, goes to
// the owner of its partition, which checks it in the aggregate's order and
// parks the aggregate at it if the gap is real there; the aggregate's later
// local records follow it through Kafka (localhold.go).
//
// A receiver that does not own that partition only learns the versions it
// handles itself, so its entry may be behind by the versions other
// instances handled: the gap may be no gap, and the entry would make every
// later local record of the aggregate a gap too, each given up in turn. It
// forgets the entry: once the copy is handled (until then the hold gives
// the aggregate's local records up anyway), the aggregate's next local
// record is taken as it comes, as after an eviction. The owner keeps its
// entry, against which it checks the copy. Which partition that is comes
// from the partitions the topic had at start (localHolds.partitionOf), as
// for the start barrier; where that is not known, the entry is kept.
func (j *job) gapGiveUp(k parkKey, last int64) {
	r := j.r
	forget := !r.mayOwnPartitionOf(k.topic, k.key)
	r.log.Warn("event stream version gap in a local record; given up here, its copy in Kafka goes to the owner of its partition (and parks there if the gap is one there)",
		zap.String("topic", k.topic), zap.String("aggregate", k.key), zap.Int64("version", j.version),
		zap.Int64("last_handled", last), zap.Bool("version_forgotten", forget))
	if forget {
		r.versions.forget(k) // before abandon lets the aggregate's next record run
	}
	j.abandon()
}

// versionHandled records the job's version as handled (or skipped by the
// handler), if it has one.
func (j *job) versionHandled() {
	if j.version > 0 && j.r.versions != nil {
		j.r.versions.handledAt(parkKey{j.rec.Topic, j.msg.AggregateID}, j.version, j.p, j.versionAnchored, j.versionClock)
	}
}
