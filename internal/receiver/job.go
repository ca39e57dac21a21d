package receiver

import (
	"context"
	"errors"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/ack"
	"github.com/wowd/wowd/internal/executor"
	"github.com/wowd/wowd/internal/metrics"
	"github.com/wowd/wowd/internal/wow"
)

// job is one record on its way through a mailbox to the handler. It is the
// executor task and the completer of its Acks (ack.Completer).
//
// Jobs are pooled. What identifies one handler attempt is (job, token): the
// token grows with every attempt and survives pooling, so an Ack of an
// earlier attempt, or of an earlier record this job carried, never matches
// again and is ignored (see arm and Complete).
type job struct {
	// token is odd while a handler attempt is armed (its outcome not taken
	// yet) and even otherwise. Only arm increments it to odd, and only the
	// first of Complete or the deadline watcher moves it on to even.
	token atomic.Uint64
	// attemptStart is when the armed attempt started (Receiver.since), for
	// the deadline watcher. Written before the token is armed.
	attemptStart atomic.Int64
	// reported is the highest attempt number the handler reported failed
	// (Retrying) during the armed try, 0 before any; reset as a try is
	// armed. A try the deadline takes made the attempts up to the one after
	// it (timedOut).
	reported atomic.Int64
	// limitWait is the token of the armed try while the handler reported
	// it waits for the handler's own limits (handler.WaitObserver), else
	// anything else: the deadline watcher passes such a try over. Being a
	// token, it means nothing once the try ends, the job is reused or the
	// handler reports the wait over.
	limitWait atomic.Uint64
	// try is the context of the latest attempt, stored before the token is
	// armed; the deadline watcher and closePartition end it.
	try atomic.Pointer[tryContext]
	// trace is the record's trace context and span (trace.go); nil
	// without either.
	trace atomic.Pointer[jobTrace]
	// own is the job's copy of a fetched record: the client allocates the
	// records of a batch in one array, which a pointer to one of them
	// would keep alive. Its key, value and headers were copied out of the
	// decompressed batch as the client buffered it (ownBytes).
	own kgo.Record
	jobState
}

// jobState is the part of a job that is reset when it goes back to the pool.
type jobState struct {
	r       *Receiver
	p       *partition
	rec     *kgo.Record
	seq     int64
	msg     handler.Message
	res     executor.Resume
	place   executor.Resume // where handler attempts run (Resume.Again): the mailbox's, a redrive's action's; zero: the caller's goroutine
	start   time.Duration   // when the record's turn started (Receiver.since)
	tried   time.Duration   // when the current handler attempt started (Receiver.since)
	failure failure         // why the record goes to the dead-letter path
	tries   int             // attempts of the current step (handler or dead-letter write)
	// attempted: handler attempts of the tries that failed and were held
	// (handler.AttemptsBefore of the next try).
	attempted int
	// heldEnds: the backoffs a success had ended (streak.ends) when the
	// record was first held (streak.overlapped).
	heldEnds int
	// callHung: a held retry waited for a call of an earlier try to
	// return (logged once).
	callHung bool
	kind     handler.Kind
	route    *Route
	ws       *wowState  // the decoded Wow message, made on first use; kept with the job to reuse its buffers
	local    *localWait // admitted through Admit (ingest), not fetched: told when the record is finished or given up
	// redriven: a parked message handed to the handler again by an
	// operator's action (see park.go); it is never parked again, a final
	// failure (or, with on-gap park, a version gap) is reported to the
	// action through local, which keeps the aggregate parked at it.
	redriven bool
	// decided: redriven, and the message the operator decided about (the
	// head that failed or parked at a gap): handed over even at a gap.
	decided bool
	// slot: the job holds one of the max-parked slots (see reservePark).
	slot bool
	// waiting: the job waits for a max-parked slot, counted in
	// Receiver.parkWaiting (see waitPark).
	waiting bool
	// version is the event stream's aggregate version (version-check), 0
	// when not checked.
	version int64
	// versionAnchored: version followed an anchored version (see
	// versionEntry.anchored).
	versionAnchored bool
	// versionClock: the clock its version is recorded with, taken when it
	// was checked (versionEntry.anchorClock, versionEntry.clock).
	versionClock uint64
	// kept is set when a try's outcome was taken from the handler (its
	// deadline passed, or it panicked): the handler may still hold
	// &msg, so the job must never carry another record. free leaves it
	// to the garbage collector instead of the pool.
	kept bool
}

// wowState is a job's Wow message: decoded, and as handlers see it. Apart
// from the job, so that jobs of raw dispatchers stay small: a job's memory
// crosses cores twice per record (made on the poll loop, finished on a
// worker).
type wowState struct {
	m      wow.Message
	route  wow.Route // for a handler that reads only the routing fields
	events []string  // the event names read by route, as views of the value
	pub    handler.Wow
}

// failure describes a final failure for the dead-letter record.
type failure struct {
	class    string
	reason   string
	attempts int
	stub     bool // the record is too large for the dead-letter topic: write it without value and headers
	// screened: the record never reached the handler (unroutable, not a
	// valid message of its topic): once dead-lettered it counts as
	// unroutable, not as a handler's failure (wowd_messages_total).
	screened bool
}

var jobPool = sync.Pool{New: func() any { return new(job) }}

func newJob(r *Receiver, p *partition, rec *kgo.Record, seq int64) *job {
	j := jobPool.Get().(*job)
	j.r, j.p, j.rec, j.seq = r, p, rec, seq
	if p != r.local {
		// The client keeps a batch's records in one array: the job keeps
		// its own copy of the record, whose bytes are already its own
		// (ownBytes).
		j.own = *rec
		rec = &j.own
		j.rec = rec
	}
	j.msg = handler.Message{
		Dispatcher: r.o.Dispatcher,
		Service:    r.o.Service,
		Topic:      rec.Topic,
		Partition:  rec.Partition,
		Offset:     rec.Offset,
		Key:        rec.Key,
		Value:      rec.Value,
		Headers:    headers(rec.Headers),
		Timestamp:  rec.Timestamp,
	}
	if len(rec.Key) > 0 {
		// The record's bytes are never modified after delivery; the string
		// lives no longer than the record.
		j.msg.AggregateID = unsafe.String(unsafe.SliceData(rec.Key), len(rec.Key))
	}
	j.traceEnter()
	return j
}

// ownBytes is a kgo hook that gives every fetched record its own copy of
// its key, value and headers, in one new allocation, as the client buffers
// it. The client's record points into its whole decompressed batch, which
// a record would keep alive as long as it is held or unfinished: a batch
// per partition or more for every window. The copy is made on the client's
// fetching goroutine right after the batch was decompressed, while its
// bytes are still in that core's cache, and not on the poll loop, which
// every record passes one at a time. The copy is never reused: handlers may
// keep strings made from it (an aggregate ID as a map key), which must not
// change.
type ownBytes struct{}

// OnFetchRecordBuffered implements kgo.HookFetchRecordBuffered.
func (ownBytes) OnFetchRecordBuffered(rec *kgo.Record) { ownRecordBytes(rec) }

// ownRecordBytes points rec's key, value and headers at a new copy of
// them, in one allocation. The sizes stay as they are, so the client's
// buffered-bytes count is unchanged; nil stays nil.
func ownRecordBytes(rec *kgo.Record) {
	n := len(rec.Key) + len(rec.Value)
	for _, h := range rec.Headers {
		n += len(h.Key) + len(h.Value)
	}
	b := make([]byte, 0, n)
	clone := func(s []byte) []byte {
		if s == nil {
			return nil
		}
		start := len(b)
		b = append(b, s...)
		return b[start:len(b):len(b)]
	}
	rec.Key, rec.Value = clone(rec.Key), clone(rec.Value)
	if len(rec.Headers) == 0 {
		rec.Headers = nil // nothing of the batch's header array
	} else {
		hs := make([]kgo.RecordHeader, len(rec.Headers))
		for i, h := range rec.Headers {
			start := len(b)
			b = append(b, h.Key...)
			hs[i] = kgo.RecordHeader{Key: unsafe.String(unsafe.SliceData(b[start:]), len(h.Key)), Value: clone(h.Value)}
		}
		rec.Headers = hs
	}
}

// The casts in headers and fillWow view a slice of one struct type as a
// slice of another. They are sound only while the two types have the same
// fields in the same order; a conversion compiles exactly then, so these
// fail to compile when either side drifts.
var (
	_ = handler.Header(kgo.RecordHeader{})
	_ = handler.WowHeader(wow.HeaderField{})
)

// headers views kgo's headers as handler headers without copying: the two
// types have the same fields.
func headers(h []kgo.RecordHeader) []handler.Header {
	if len(h) == 0 {
		return nil
	}
	return unsafe.Slice((*handler.Header)(unsafe.Pointer(unsafe.SliceData(h))), len(h))
}

// free returns the job to the pool. Its token is kept: late Acks of any of
// its attempts keep failing their check. A job whose handler may still hold
// its message (see kept) is not pooled.
func (j *job) free() {
	if j.kept {
		return
	}
	j.try.Store(nil)
	j.trace.Store(nil)
	ws := j.ws
	j.jobState = jobState{}
	j.own = kgo.Record{}
	if ws != nil {
		ws.pub = handler.Wow{} // no references into the record while pooled
		clear(ws.events)
		ws.route.Reset()
		j.ws = ws // keep its buffers; Decode resets them
	}
	jobPool.Put(j)
}

// Run is called by the executor when the record's turn comes.
func (j *job) Run(res executor.Resume) executor.Status {
	if j.p.isClosed() {
		j.drop()
		return executor.Done
	}
	j.res = res
	if res != (executor.Resume{}) {
		j.place = res
	}
	j.start = j.r.since()
	j.tried = j.start
	j.traceStart()
	if r := j.r; j.p == r.local && !j.redriven && r.heldLocally(j.rec.Topic, j.msg.AggregateID) {
		// A copy of an earlier message of its aggregate, given up here,
		// may not be handled yet by the owner of its partition: given up
		// too, its copy in Kafka goes after it (localhold.go).
		j.abandon()
		return executor.Pending
	}
	if r := j.r; !j.redriven && r.park != nil {
		if r.beforeParkCheck != nil {
			r.beforeParkCheck(j.msg.AggregateID)
		}
		switch {
		case j.p == r.local:
			if r.parkedAnywhere(j.rec.Topic, j.msg.AggregateID) {
				// Its aggregate is parked (or that is not known yet):
				// given up, its copy in Kafka goes through the owner.
				j.abandon()
				return executor.Pending
			}
		default:
			// First: parked again since (by hand, with the fetch below
			// what the action resolved), the aggregate's records the
			// action resolved are still duplicates, not to park behind
			// the new head.
			if j.p.resolvedByAction(j.msg.AggregateID, j.rec.Offset) {
				// Delivered again (the commit was behind the parked
				// messages) after an action of this incarnation unparked
				// its aggregate: handed over (or dead-lettered) by it,
				// before later messages, which it must not follow.
				r.log.Debug("a message an action on its parked aggregate resolved delivered again; skipped as a duplicate",
					zap.String("topic", j.rec.Topic), zap.Int32("partition", j.rec.Partition), zap.Int64("offset", j.rec.Offset),
					zap.String("aggregate", j.msg.AggregateID))
				j.finish(metrics.Skipped)
				return executor.Pending
			}
			if st, parked := r.parkedAgg(j.rec.Topic, j.msg.AggregateID); parked {
				if j.rec.Partition == st.Partition && j.rec.Offset < st.Offset {
					// Delivered again (the commit was behind the parked
					// head): it was finished before the head failed, and
					// parking it would put it after the head.
					r.log.Debug("a message before its parked aggregate's head delivered again; skipped as a duplicate",
						zap.String("topic", j.rec.Topic), zap.Int32("partition", j.rec.Partition), zap.Int64("offset", j.rec.Offset),
						zap.String("aggregate", j.msg.AggregateID), zap.Int64("head_offset", st.Offset))
					j.finish(metrics.Skipped)
					return executor.Pending
				}
				j.park() // behind its aggregate's parked messages
				return executor.Pending
			}
			if j.p.isClosed() {
				// Lost meanwhile: its parked aggregates are forgotten after
				// it closes (unloadParked), so "not parked" may only say
				// that; delivered now, a record would run ahead of its
				// aggregate's parked messages (the simulation's seed 12
				// under -race: #29 before #12). Seen not parked, it is
				// seen closed if that is why.
				j.drop()
				return executor.Done
			}
		}
	}
	if j.screen() {
		j.call()
	}
	return executor.Pending // the Ack (or admit) completes it, possibly already done
}

// retry makes another attempt at a held message, where its route makes
// attempts: a Blocker's on the executor's blocking pool, as its first
// attempt was (the timer that calls retry is no goroutine of the pool's,
// and held messages would each call the Blocker on their own). If the
// pool stops first, the message is abandoned: not finished, so delivered
// again.
func (j *job) retry() {
	if tc := j.try.Load(); tc != nil && tc.calls.Load() > 0 {
		// A call of the try the deadline concluded has not returned (its
		// handler hangs, deaf to its context; a Blocker's attempt resumed
		// on the pool counts): another call would hang beside it, one
		// more per retry, each holding a goroutine (a Blocker's, of the
		// shared blocking pool). Wait for it.
		if !j.callHung {
			j.callHung = true // logged once per record: the aggregate waits, the partition's lag grows
			j.r.log.Warn("held message not retried: the handler's call of its timed-out try has not returned; its aggregate waits for it",
				zap.String("topic", j.rec.Topic), zap.Int32("partition", j.rec.Partition), zap.Int64("offset", j.rec.Offset))
		}
		j.after(j.r.holdBackoff(j.tries), j.retry)
		return
	}
	if j.place == (executor.Resume{}) {
		j.retryHere()
		return
	}
	j.place.Again(j.retryHere, j.abandon)
}

func (j *job) retryHere() {
	if j.p.isClosed() {
		// Its partition went while the retry waited for the pool (after's
		// own watch ended when its timer fired): the next owner has it.
		j.abandon()
		return
	}
	j.tried = j.r.since()
	j.call()
}

// arm starts a handler attempt: it returns the attempt's token, which the
// attempt's Ack carries.
func (j *job) arm() uint64 {
	j.attemptStart.Store(int64(j.tried))
	j.reported.Store(0)
	return j.token.Add(1) // even to odd
}

// take claims the outcome of attempt token: it reports true to exactly one
// caller per attempt, and false for any token but the armed one.
func (j *job) take(token uint64) bool {
	return token&1 == 1 && j.token.CompareAndSwap(token, token+1)
}

// call makes one handler attempt. A panic in the handler's Handle is
// recovered here and becomes the attempt's outcome: a permanent failure of
// class panic.
func (j *job) call() {
	tc := newTry(j.p)
	tc.vals = j.traceValues()
	tc.before = j.attempted
	if j.place.Blocking() {
		tc.pool = j.place
	}
	tc.j, tc.token = j, j.token.Load()+1 // the token arm gives: only arm moves it to odd
	j.try.Store(tc)
	r, token := j.r, j.arm()
	if j.p.ctx.Err() != nil {
		// Closed while the try was being made: closePartition may have
		// looked at the job before try was stored, so end it here.
		tc.end(context.Canceled)
	}
	at := j.position()
	tc.calls.Add(1)
	defer func() {
		tc.calls.Add(-1) // tc is this call's alone: j may be reused by now
		if v := recover(); v != nil {
			err := handler.Recovered(v, debug.Stack())
			if !j.take(token) {
				// The handler reported an outcome before it panicked, and j
				// may be finished and reused by now: only r and at are
				// safe to use. The outcome stands.
				r.panicked(at, err, true)
				return
			}
			j.kept = true // goroutines the handler started may still read the message
			j.endTry()
			j.conclude(err)
		}
	}()
	r.o.Handler.Handle(tc, &j.msg, ack.New(j, token))
}

func (j *job) position() position {
	return position{topic: j.rec.Topic, partition: j.rec.Partition, offset: j.rec.Offset}
}

// position is where a record is, for logs that outlive its job.
type position struct {
	topic     string
	partition int32
	offset    int64
}

// Complete implements ack.Completer: the outcome of the attempt token.
// Only the first outcome of the armed attempt counts; a second Ack, the Ack
// of an earlier attempt and an Ack after the deadline are ignored.
func (j *job) Complete(token uint64, err error) {
	if !j.take(token) {
		return
	}
	j.endTry()
	j.conclude(err)
}

// endTry ends the context of the try whose outcome the caller took: the
// try is over. Work a handler left bound to it (a goroutine waiting for
// Done, context.AfterFunc) stops now; were it left open, nothing would end
// it once the job left its partition's tracker, not even the partition's
// closing.
func (j *job) endTry() {
	if tc := j.try.Load(); tc != nil {
		tc.end(context.Canceled)
	}
}

// conclude acts on the outcome of a try whose outcome the caller took:
// finish the record, hold it and try again, dead-letter it, or abandon it.
func (j *job) conclude(err error) {
	r := j.r
	if err == nil {
		r.m.HandlerDuration(r.since() - j.start)
		j.versionHandled()
		r.outcome(false, nil)
		j.finish(metrics.Handled)
		return
	}
	if errors.Is(err, handler.ErrPanicked) {
		r.panicked(j.position(), err, false)
		// A panic handler.WithRetry recovered comes as an outcome: the
		// handler may have started goroutines that still hold the
		// message, as with a panic call recovers itself.
		j.kept = true
	}
	class, _ := handler.Classify(err)
	if class == handler.Transient && j.p.ctx.Err() == nil {
		// A try ended by its partition going (revoked, lost, stopping) is
		// no news about the sink: it must not count toward a backoff.
		// (Nor is a skip or a refusal for good: a handler may answer so
		// without asking its sink, as for an event it does not project.)
		r.outcome(true, &j.msg)
	}
	switch {
	case class == handler.Skip:
		j.versionHandled()
		r.m.HandlerDuration(r.since() - j.start)
		j.finish(metrics.Skipped)
	case j.p.ctx.Err() != nil:
		// Revoked or shutting down: the failure may only be the cancellation.
		// Not finished; the next owner gets it again.
		j.abandon()
	case (!r.o.DeadLetter.Enabled && r.park == nil) || (class == handler.Transient && r.fails.overlapped(r.epoch.Add(j.tried), &j.msg, j.heldEnds, j.tries > 0)):
		// Dead letters disabled, or a transient failure of an attempt made
		// while the sink was down: dead-lettering would empty the stream
		// into the dead-letter topic. Hold the message (not the worker) and
		// try again.
		if j.tries == 0 {
			j.heldEnds = r.fails.endCount()
		}
		j.tries++
		j.attempted += handler.Attempts(err)
		wait := r.holdBackoff(j.tries)
		r.m.Count(metrics.Retried, 1)
		j.traceRetry(j.tries, class, err, wait)
		r.log.Warn("handler failed; holding the message and retrying",
			zap.String("topic", j.rec.Topic), zap.Int32("partition", j.rec.Partition), zap.Int64("offset", j.rec.Offset),
			zap.String("class", class.String()), zap.Int("attempt", j.tries), zap.Duration("wait", wait), zap.Error(err))
		j.after(wait, j.retry)
	default:
		r.m.HandlerDuration(r.since() - j.start)
		cls := class.String()
		if errors.Is(err, handler.ErrPanicked) {
			cls = "panic"
		}
		// Every attempt of the record: those of the tries held before this
		// one too (the dead letter's and the parked copy's attempts).
		j.failure = failure{class: cls, reason: err.Error(), attempts: j.attempted + handler.Attempts(err)}
		j.tries = 0
		switch {
		case j.redriven:
			j.local.fail = j.failure // the action keeps the aggregate parked with this at its head
			j.finish(metrics.Parked)
		case r.park != nil && j.p == r.local:
			// Not parked here: its copy in Kafka fails at the owner of its
			// partition, which parks it in order.
			r.log.Warn("local record failed for good; given up here, its copy in Kafka goes to the owner of its partition (and parks there)",
				zap.String("topic", j.rec.Topic), zap.String("aggregate", j.msg.AggregateID), zap.String("class", cls), zap.Error(err))
			j.abandon()
		case r.park != nil && len(j.rec.Key) > 0:
			j.park()
		default:
			r.deadLetter(j)
		}
	}
}

// after runs fn after d unless the partition goes first, in which case the
// record is abandoned at once. Exactly one of the two happens.
func (j *job) after(d time.Duration, fn func()) {
	var decided atomic.Bool // separate from j: j is reused once abandoned
	stop := context.AfterFunc(j.p.ctx, func() {
		if decided.CompareAndSwap(false, true) {
			j.abandon()
		}
	})
	time.AfterFunc(d, func() {
		if decided.CompareAndSwap(false, true) {
			stop()
			fn()
		}
	})
}

// finish marks the record done: it counts toward the commit watermark and
// its mailbox moves on.
func (j *job) finish(o metrics.Outcome) {
	r, p, res, local := j.r, j.p, j.res, j.local
	j.releasePark()
	r.m.Count(o, 1)
	j.traceEnd(o)
	r.finished(p, j.seq)
	inMailbox := res != (executor.Resume{})
	j.free()
	if local != nil {
		local.finished(o)
	}
	if inMailbox {
		// Failed: it ended without being handled (dead-lettered, parked,
		// discarded, unroutable, dropped). A local one was handled, by the
		// service that ingested it.
		res.Complete(o != metrics.Handled && o != metrics.Skipped && o != metrics.Local)
	}
}

// passMarker finishes a transaction marker (a control record) as it is
// admitted: no message, so no handler, outcome or dead letter; its offset
// is committed with those before it.
func (j *job) passMarker() {
	r, p := j.r, j.p
	r.finished(p, j.seq)
	j.free()
}

// abandon gives up on the record without finishing it: its offset is not
// committed, so it is redelivered.
func (j *job) abandon() {
	res := j.res
	j.drop()
	if res != (executor.Resume{}) {
		res.Complete(true)
	}
}

// drop releases a record that will not be finished (its partition went or
// the executor is closing).
func (j *job) drop() {
	r, p, seq, local := j.r, j.p, j.seq, j.local
	if p == r.local && local != nil {
		// Its copy goes to the owner of its partition: the aggregate's
		// later local records must not run ahead of it (localhold.go).
		local.giveUp(r)
	}
	r.m.Count(metrics.Dropped, 1)
	j.traceEnd(metrics.Dropped)
	j.releasePark()
	r.forget(p, seq)
	r.lower(p)
	r.releaseOf(p)
	j.free()
	if local != nil {
		local.dropped()
	}
}

// unroutable handles a record that no handler can take.
func (j *job) unroutable(reason string) {
	r := j.r
	r.log.Warn("unroutable record", zap.String("topic", j.rec.Topic), zap.Int32("partition", j.rec.Partition),
		zap.Int64("offset", j.rec.Offset), zap.String("reason", reason))
	if !r.o.DeadLetter.Enabled {
		j.finish(metrics.Unroutable)
		return
	}
	j.failure = failure{class: "unroutable", reason: reason, attempts: 0, screened: true}
	r.deadLetter(j)
}

// holdBackoff returns the wait before attempt n+1 of a held record (or of
// its dead-letter write): the SDK's retry backoff, from 200ms to
// RetryBackoff.
func (r *Receiver) holdBackoff(n int) time.Duration {
	return handler.RetryPolicy{Initial: 200 * time.Millisecond, Max: r.o.RetryBackoff}.Backoff(n)
}

// Retrying is told by the handler that an attempt of m failed and will be
// retried after wait. The try's deadline starts again after the wait.
func (r *Receiver) Retrying(m *handler.Message, attempt int, err error, wait time.Duration) {
	r.extend(m, attempt, wait)
	r.traceRetrying(m, attempt, err, wait)
	r.outcome(true, m)
	r.m.Count(metrics.Retried, 1)
	r.log.Debug("handler attempt failed; retrying", zap.String("topic", m.Topic), zap.Int32("partition", m.Partition),
		zap.Int64("offset", m.Offset), zap.Int("attempt", attempt), zap.Duration("wait", wait), zap.Error(err))
}

// outcome feeds the failure streak with one handler attempt of m (nil for
// a success).
func (r *Receiver) outcome(failed bool, m *handler.Message) {
	if !failed && r.fails.unchangedBySuccess() {
		return // nothing failed lately: the common case takes no lock
	}
	started, ended := r.fails.record(failed, m, time.Now())
	switch {
	case started:
		r.m.Backoff()
		r.log.Warn("most recent handler attempts fail: backing off, fetching paused and failures held instead of dead-lettered",
			zap.Duration("delay", r.fails.current()))
	case ended:
		r.log.Info("handler attempts succeed again: backoff over, fetching resumes")
		r.notify()
	}
}

// PanickedAfterOutcome counts and logs a panic of the handler, recovered
// by handler.WithRetry, that came after the attempt had reported the
// outcome of the message at topic, partition and offset: the outcome
// stands (handler.PanicObserver, through the daemon's observer).
func (r *Receiver) PanickedAfterOutcome(topic string, partition int32, offset int64, err error) {
	r.panicked(position{topic: topic, partition: partition, offset: offset}, err, true)
}

// panicked logs and counts a panic of the handler. The first panic of a
// receiver is logged with its stack; later ones without, so a handler that
// panics on every message cannot flood the log.
func (r *Receiver) panicked(at position, err error, outcomeStands bool) {
	r.m.Panic()
	fields := []zap.Field{zap.String("topic", at.topic), zap.Int32("partition", at.partition),
		zap.Int64("offset", at.offset), zap.Error(err)}
	var withStack interface{ PanicStack() []byte }
	if errors.As(err, &withStack) && r.panicLogged.CompareAndSwap(false, true) {
		fields = append(fields, zap.ByteString("stack", withStack.PanicStack()))
	}
	if outcomeStands {
		r.log.Error("handler panicked after reporting the message's outcome; the outcome stands", fields...)
		return
	}
	r.log.Error("handler panicked; the message fails permanently", fields...)
}
