package receiver

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// partition is one incarnation of an owned partition: created on
// assignment, closed on revoke, loss or shutdown. Records and completions
// refer to their incarnation, never to (topic, partition), so a completion
// that arrives after its partition moved on changes nothing.
type partition struct {
	topic     string
	partition int32
	ctx       context.Context // given to handlers; canceled on close
	cancel    context.CancelFunc
	since     time.Time // when the incarnation began
	opened    uint64    // incarnations' value for it: later incarnations have higher ones
	// of is, for the pseudo-partition of a parked aggregate's redriven
	// messages (Receiver.actionPartition), the incarnation whose aggregate
	// it is; nil for the others. Set before the partition is shared.
	of *partition
	// member is the group member ID the incarnation was assigned under
	// (see Receiver.stale); set before the partition is shared.
	member string

	mu     sync.Mutex // guards tr, paused, first, fetched, hwm, and the change of closed
	tr     *tracker
	paused pauseReason // why the partition is paused on its own; paused in the client exactly while non-zero
	first  int64       // first offset delivered in this incarnation, -1 before
	// fetched: first offset fetched in this incarnation, held or
	// delivered, -1 before (where its lag counts from until a commit).
	fetched int64
	hwm     int64 // high watermark seen on the last fetch

	// committed is the last offset this incarnation committed, -1 before;
	// written under Receiver.commitMu.
	committed atomic.Int64
	// closedAt is when the incarnation closed (Receiver.since), 0 before:
	// a try waiting for its handler's limits is timed from then
	// (Receiver.overdue).
	closedAt atomic.Int64

	pending atomic.Int64 // records pushed, not finished or dropped

	// parkEpoch is the owner epoch of this incarnation's parking writes
	// (see park.Book), set by loadParked before the partition is handled.
	parkEpoch atomic.Int64

	// held are records the poll loop took from the client but has not
	// admitted yet, in offset order: the window or the partition's share
	// was full. They are not tracked (nothing commits past them) and are
	// dropped with the incarnation. Only the poll loop reads and writes
	// held; holding mirrors len(held) > 0 for completions, which wake the
	// poll loop when the partition has room again.
	held    []*kgo.Record
	holding atomic.Bool
	waiting atomic.Int64 // len(held), for status readers
	fetchN  int          // the most records one poll brought of the partition (the poll loop's)
	listed  bool         // in Receiver.holding (the poll loop's)
	// unwindowed: its records take no place in the receiver's window (the
	// redriven messages of a parked aggregate, see actionPartition).
	unwindowed bool

	// unparked: the aggregates an action of this incarnation unparked,
	// by ID, with the source offset below which their records are resolved
	// (handed over by a redrive, or dead-lettered by a skip or discard). A
	// record of one of them below it fetched again (the commit was behind
	// the parked messages) is passed over rather than handed over after the
	// later ones the action handed over. An entry goes once a record of the
	// aggregate at or past it is admitted, or with the incarnation.
	// Guarded by unparkedMu; nunparked is its length, read without the
	// lock first.
	unparkedMu sync.Mutex
	unparked   map[string]int64
	nunparked  atomic.Int32
	// closed is set once, under mu, by Receiver.closePartition. Read without
	// mu where a stale false only delays a drop; under mu where it decides
	// whether the client may still be told to pause or resume.
	closed atomic.Bool
}

// pauseReason is a set of reasons for a partition-level pause. The client's
// pauses are not counted, so the receiver keeps the reasons and pauses the
// partition when the first one appears, resumes it when the last one goes.
type pauseReason uint8

const (
	// pauseSpan: the uncommitted span grew past spanCap (a record holds
	// the commit while later ones finish).
	pauseSpan pauseReason = 1 << iota
	// pauseShare: the partition holds its share of the window (a stuck
	// aggregate with a backlog) and the receiver holds enough of its
	// records waiting (see Receiver.pauseHolding), or gave them back to
	// the client for lack of memory (shedStuck), so fetching it more is
	// pointless. The partition's share limits admission, not this pause:
	// pausing a partition in the client drops what the client buffered of
	// it, which is fetched and decompressed again later.
	pauseShare
	// pauseLoading: newly assigned, waiting for its parked aggregates to be
	// read from the state topic (see park.go).
	pauseLoading
)

// String names the reasons, joined by '+': span, share, parked-state.
func (w pauseReason) String() string {
	var s string
	for _, r := range []struct {
		bit  pauseReason
		name string
	}{{pauseSpan, "span"}, {pauseShare, "share"}, {pauseLoading, "parked-state"}} {
		if w&r.bit != 0 {
			if s != "" {
				s += "+"
			}
			s += r.name
		}
	}
	return s
}

// newLocalPartition returns the pseudo-partition of the records the ingest
// admits: they have no offsets and finish in any order.
func newLocalPartition() *partition {
	p := newPartition("", -1)
	p.tr = newUnorderedTracker()
	return p
}

func newPartition(topic string, p int32) *partition {
	ctx, cancel := context.WithCancel(context.Background())
	pt := &partition{topic: topic, partition: p, ctx: ctx, cancel: cancel, since: time.Now(), tr: newTracker(), first: -1, fetched: -1,
		opened: incarnations.Add(1)}
	pt.committed.Store(-1)
	return pt
}

func (p *partition) isClosed() bool { return p.closed.Load() }

// closePartition ends the incarnation p: its own pauses are lifted in the
// client (pauses outlive assignments there), queued records of it are
// dropped when their turn comes, running handlers see their context
// canceled, late completions are ignored. Setting closed and lifting the
// pause happen together under p.mu, and pausing only ever happens under
// p.mu while p is open, so a pause never outlives its incarnation.
func (r *Receiver) closePartition(p *partition) {
	p.mu.Lock()
	closing := !p.closed.Load()
	from, to := int64(-1), int64(-1)
	if closing {
		if p.paused != 0 && p.partition >= 0 {
			r.cl.ResumeFetchPartitions(map[string][]int32{p.topic: {p.partition}})
		}
		p.paused = 0
		p.closedAt.Store(int64(max(1, r.since())))
		p.closed.Store(true)
		from, to = p.uncommittedLocked()
	}
	p.mu.Unlock()
	p.cancel()
	if !closing {
		return
	}
	if from >= 0 {
		if ce := r.log.Check(zap.DebugLevel, closedUncommitted); ce != nil {
			ce.Write(zap.String("topic", p.topic), zap.Int32("partition", p.partition),
				zap.Int64("from", from), zap.Int64("to", to))
		}
	}
	// End the tries in its handlers (after the cancel: a try made from now
	// on sees the partition's context canceled and ends itself), and keep
	// watching their deadlines while any runs: a try that ignores its end
	// would otherwise hold its aggregate's mailbox forever.
	p.mu.Lock()
	p.tr.jobs(func(j *job) {
		if tc := j.try.Load(); tc != nil && tc.p == p {
			tc.end(context.Canceled)
		}
	})
	p.mu.Unlock()
	r.retire(p)
}

// closedUncommitted is logged (debug) as an incarnation closes with
// records it took in above its last commit, from and to being their first
// and last offsets: the records a next owner may deliver again. The
// simulation (test/sim) reads it to tell the duplicates at-least-once
// delivery allows from others.
const closedUncommitted = "partition let go with records above its last commit: its next owner may deliver them again, whatever became of them here"

// uncommittedLocked returns the offsets of the records the incarnation p
// took in above its last successful commit (all of them, without one),
// first and last, or -1, -1 when there are none. Whether they finished,
// were dropped, or finish after the close, the next owner starts at the
// group's committed offset: from, or above it where a commit of p was
// applied without an answer (a commit in flight, one that timed out), so
// it may deliver them again. Called with p.mu held; -1, -1 for the
// records of no partition (the ingest's, a parked-aggregate action's).
func (p *partition) uncommittedLocked() (from, to int64) {
	if p.partition < 0 || p.tr.set != nil || p.first < 0 {
		return -1, -1
	}
	from = p.committed.Load()
	if from < 0 {
		from = p.first
	}
	if from > p.tr.last {
		return -1, -1
	}
	return from, p.tr.last
}

// retire has the deadline watcher watch p, an incarnation no longer owned
// (revoked and draining, or closed) whose tries may still run, until none
// of its records is pending. Without a handler timeout there is no watcher
// to prune the list, and with nothing pending nothing to watch: neither is
// kept, or every rebalance would hold on to the incarnations it revoked.
func (r *Receiver) retire(p *partition) {
	if r.o.HandlerTimeout <= 0 || p.pending.Load() == 0 {
		return
	}
	r.retireMu.Lock()
	defer r.retireMu.Unlock()
	if !slices.Contains(r.retiring, p) {
		r.retiring = append(r.retiring, p)
	}
}

// pauseLocked adds why to p's pause reasons, pausing p in the client if it
// was not. Called with p.mu held; does nothing once p is closed.
func (r *Receiver) pauseLocked(p *partition, why pauseReason) {
	if p.closed.Load() || p.paused&why != 0 {
		return
	}
	if p.paused == 0 {
		r.cl.PauseFetchPartitions(map[string][]int32{p.topic: {p.partition}})
	}
	p.paused |= why
}

// unpauseLocked removes why from p's pause reasons, resuming p in the client
// when none is left. Called with p.mu held; does nothing once p is closed.
func (r *Receiver) unpauseLocked(p *partition, why pauseReason) {
	if p.closed.Load() || p.paused&why == 0 {
		return
	}
	p.paused &^= why
	if p.paused == 0 {
		r.cl.ResumeFetchPartitions(map[string][]int32{p.topic: {p.partition}})
	}
}

// finished records that the record seq of p finished, in its incarnation's
// tracker, lifts the partition's pauses that no longer hold and releases
// its window slot.
func (r *Receiver) finished(p *partition, seq int64) {
	lifted := false
	p.mu.Lock()
	if !p.closed.Load() {
		p.tr.complete(seq)
		if p.paused&pauseSpan != 0 && p.tr.span() <= r.spanCap/2 {
			r.unpauseLocked(p, pauseSpan)
			lifted = true
		}
	} else {
		// A closed incarnation's watermark stays where its close left it,
		// but its tracker lets the job go: the caller pools it next.
		p.tr.detach(seq)
	}
	n := p.pending.Add(-1)
	if r.liftShareLocked(p, n) {
		lifted = true
	}
	p.mu.Unlock()
	if hook := testHookDone.Load(); hook != nil {
		(*hook)(r, p, lifted)
	}
	if p.holding.Load() && (lifted || n == r.shareCap()-r.batch) {
		r.notify() // a batch of its held records may go in
	}
	r.releaseOf(p)
}

// lower takes one off p's unfinished count, for a record or an operator's
// action that ended without finished (dropped, or not a record), and lifts
// p's share pause once it no longer holds.
func (r *Receiver) lower(p *partition) {
	p.mu.Lock()
	lifted := r.liftShareLocked(p, p.pending.Add(-1))
	p.mu.Unlock()
	if lifted {
		r.notify()
	}
}

// liftShareLocked lifts the pause of p, a partition that gave its held
// records back (shedStuck), once n, its unfinished count just lowered, is
// down to half its share: it fetches again. (While it holds records, the
// poll loop lifts the pause.) Every decrement of a partition's count runs
// it under p.mu, so the last one always does, and so does recheckShares when
// the share grows. Called with p.mu held; reports whether it lifted the
// pause.
func (r *Receiver) liftShareLocked(p *partition, n int64) bool {
	if p.closed.Load() || p.paused&pauseShare == 0 || p.holding.Load() || n > r.shareCap()/2 {
		return false
	}
	r.unpauseLocked(p, pauseShare)
	return true
}

// releaseOf gives back the window slot of a record of p.
func (r *Receiver) releaseOf(p *partition) {
	if p.unwindowed {
		r.changed.Notify()
		return
	}
	r.release()
}

// testHookDone, when a test sets it, runs after finished updated a partition,
// with whether the update lifted one of its pauses.
// Atomic: a test sets it while workers of a running receiver read it.
var testHookDone atomic.Pointer[func(r *Receiver, p *partition, lifted bool)]

// forget detaches the job of seq from p's tracker without finishing the
// record: the job was dropped and may be reused. Closed or not: a tracker
// never holds a job that went back to the pool, whose fields a scan of it
// (resolvedBelow, the deadline watcher's) would read while another record
// is being written into them.
func (r *Receiver) forget(p *partition, seq int64) {
	p.mu.Lock()
	p.tr.detach(seq)
	p.mu.Unlock()
}

// noteUnparked records that an action unparked the aggregate id, resolving
// its records below floor.
func (p *partition) noteUnparked(id string, floor int64) {
	p.unparkedMu.Lock()
	defer p.unparkedMu.Unlock()
	if p.unparked == nil {
		p.unparked = make(map[string]int64)
	}
	p.unparked[id] = max(p.unparked[id], floor)
	p.nunparked.Store(int32(len(p.unparked)))
}

// resolvedByAction reports whether the record of aggregate id at offset was
// resolved by an action that unparked the aggregate (see unparked). A
// record at or past the floor ends the entry: the aggregate's later
// records come after it; so do the entries the partition's commit passed
// (every record below them was delivered and finished).
func (p *partition) resolvedByAction(id string, offset int64) bool {
	if p.nunparked.Load() == 0 {
		return false
	}
	p.unparkedMu.Lock()
	defer p.unparkedMu.Unlock()
	if c := p.committed.Load(); c >= 0 {
		for k, floor := range p.unparked {
			if floor <= c {
				delete(p.unparked, k)
			}
		}
	}
	floor, ok := p.unparked[id]
	if ok && offset >= floor {
		delete(p.unparked, id)
		ok = false
	}
	p.nunparked.Store(int32(len(p.unparked)))
	return ok
}
