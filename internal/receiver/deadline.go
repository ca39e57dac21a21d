package receiver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/wowd/wowd/handler"
)

// ErrHandlerTimeout is the outcome of a handler attempt that was not
// acknowledged within the handler timeout.
var ErrHandlerTimeout = errors.New("handler did not acknowledge in time")

// watchDeadlines fails the handler attempts that run past HandlerTimeout,
// checking every tenth of it (at least every 10ms, at most every second).
// It runs until Stop; without a timeout it only waits for Stop.
func (r *Receiver) watchDeadlines() {
	defer close(r.watchDone)
	limit := r.o.HandlerTimeout
	if limit <= 0 {
		<-r.watchStop
		return
	}
	t := time.NewTicker(min(max(limit/10, 10*time.Millisecond), time.Second))
	defer t.Stop()
	var late []lateAttempt
	for {
		select {
		case <-r.watchStop:
			return
		case <-t.C:
		}
		late = r.overdue(late[:0], r.since()-limit)
		for _, a := range late {
			// Whoever takes the attempt's outcome first wins: the handler's
			// Ack, or this. A job finished and reused meanwhile carries
			// another token, so take fails.
			if a.j.take(a.token) {
				a.try.end(context.DeadlineExceeded)
				r.timedOut(a.j)
			}
		}
		clear(late)
	}
}

// lateAttempt is an attempt found running past its deadline.
type lateAttempt struct {
	j     *job
	token uint64
	try   *tryContext
}

// overdue appends the armed attempts that started before cutoff: of the
// owned partitions, the local records, and the closed incarnations whose
// tries still run.
func (r *Receiver) overdue(late []lateAttempt, cutoff time.Duration) []lateAttempt {
	check := func(p *partition) {
		p.mu.Lock()
		p.tr.jobs(func(j *job) {
			// The token first: try and attemptStart are written before the
			// token is armed, so if the token read here is still armed
			// when take succeeds, what is read after it belongs to that
			// attempt. A job dropped here and reused elsewhere has a try
			// of another partition.
			token := j.token.Load()
			if token&1 == 0 {
				return
			}
			tc := j.try.Load()
			if tc == nil || tc.p != p {
				return
			}
			start := time.Duration(j.attemptStart.Load())
			if j.limitWait.Load() == token {
				// Waits for the handler's own limits: not timed while its
				// partition is owned. A try of a partition let go is timed
				// from then, waiting or not: a handler whose wait does not
				// watch the try's context would hold the aggregate's
				// mailbox for good (and one that does has a whole timeout
				// to give it up before it counts as one).
				if tc.p.ctx.Err() == nil {
					return
				}
				if at := time.Duration(p.closedAt.Load()); at > 0 {
					start = at
				}
			}
			if start < cutoff {
				late = append(late, lateAttempt{j, token, tc})
			}
		})
		p.mu.Unlock()
	}
	for _, p := range r.active() {
		check(p)
	}
	check(r.local)
	r.retireMu.Lock()
	retiring := r.retiring[:0]
	for _, p := range r.retiring {
		if p.pending.Load() > 0 {
			retiring = append(retiring, p)
		}
	}
	clear(r.retiring[len(retiring):])
	r.retiring = retiring
	keep := slices.Clone(retiring)
	r.retireMu.Unlock()
	for _, p := range keep {
		check(p)
	}
	return late
}

// timedOut concludes an attempt that ran past its deadline: a transient
// failure, like a timeout of the sink.
func (r *Receiver) timedOut(j *job) {
	r.m.Timeout()
	r.log.Warn("handler did not acknowledge in time; the attempt counts as a transient failure and its late acknowledgement is ignored",
		zap.String("topic", j.rec.Topic), zap.Int32("partition", j.rec.Partition), zap.Int64("offset", j.rec.Offset),
		zap.Duration("timeout", r.o.HandlerTimeout))
	j.kept = true // the handler still has the message: never give the job another record
	// The try made the attempts up to the one after the last it reported
	// failed (numbered on from the earlier tries': handler.AttemptsBefore),
	// so that the next try numbers on past them.
	n := 1
	if rep := int(j.reported.Load()); rep > 0 {
		n = max(1, rep+1-j.attempted)
	}
	j.conclude(handler.WithAttempts(n, handler.Classed(handler.Transient, fmt.Errorf("%w (timeout %v)", ErrHandlerTimeout, r.o.HandlerTimeout))))
}

// extend moves the deadline of m's armed attempt to HandlerTimeout after
// wait from now: the handler reported that attempt number attempt failed
// and that it retries after wait; the job keeps the highest number
// reported.
func (r *Receiver) extend(m *handler.Message, attempt int, wait time.Duration) {
	if r.o.HandlerTimeout <= 0 {
		return // no deadline: nothing to move, and no try is timed out
	}
	start := int64(r.since() + wait)
	r.armedTry(m, func(j *job, token uint64) {
		// Only ever raised: a report that reaches here after a later one
		// (an observer called from another goroutine) never shortens the
		// deadline or lowers the count.
		raise(&j.attemptStart, start)
		raise(&j.reported, int64(attempt))
		// An attempt that waited for the handler's limits ended without
		// its Started (a handler other than the http sink may): the
		// retry is timed again.
		j.limitWait.CompareAndSwap(token, 0)
	})
}

// Waiting is told by the handler that the try whose context ctx is (or
// derives from) waits for the handler's own limits (its rate limit, its cap
// on requests in flight): the try's deadline does not run until Started,
// or a retry report (extend). A report for a try that is over, that ctx
// does not name, or whose message is not m, changes nothing.
func (r *Receiver) Waiting(ctx context.Context, m *handler.Message) {
	if tc := tryOf(ctx); tc != nil && r.o.HandlerTimeout > 0 && tc.armed() && &tc.j.msg == m {
		// Only ever raised: a report of a try that ended between armed
		// and here must not overwrite the mark of the next try (tokens
		// only grow), whose deadline would then run while it waits.
		for cur := tc.j.limitWait.Load(); cur < tc.token && !tc.j.limitWait.CompareAndSwap(cur, tc.token); cur = tc.j.limitWait.Load() {
		}
	}
}

// Started is told by the handler that the try of ctx it reported waiting
// makes its attempt now: the try's deadline starts again from now. (The
// wait's mark is a token, never reset to 0 by a later try: Waiting only
// raises it; 0 here means the try's mark was taken by this Started.)
func (r *Receiver) Started(ctx context.Context, m *handler.Message) {
	if tc := tryOf(ctx); tc != nil && r.o.HandlerTimeout > 0 && tc.armed() && &tc.j.msg == m && tc.j.limitWait.Load() == tc.token {
		// The start first, then the mark: a deadline watcher between the
		// two must not see a try no longer waiting that started long ago.
		raise(&tc.j.attemptStart, int64(r.since()))
		tc.j.limitWait.CompareAndSwap(tc.token, 0)
	}
}

// armed reports whether the attempt the try was made for is still armed
// (its outcome not taken): the job has not moved on to another.
func (c *tryContext) armed() bool {
	return c.j != nil && c.j.token.Load() == c.token && c.j.try.Load() == c
}

// armedTry calls fn, under its partition's lock, with the job whose armed
// try has m (the pointer Handle was given) and that try's token; not at
// all when no such try is armed (a report the receiver cannot place).
// Retry reports are rare, so finding m's job by a scan of its partition is
// fine.
func (r *Receiver) armedTry(m *handler.Message, fn func(j *job, token uint64)) {
	scan := func(p *partition) {
		if p == nil {
			return
		}
		p.mu.Lock()
		p.tr.jobs(func(j *job) {
			if &j.msg != m {
				return
			}
			if token := j.token.Load(); token&1 == 1 {
				if tc := j.try.Load(); tc != nil && tc.p == p {
					fn(j, token)
				}
			}
		})
		p.mu.Unlock()
	}
	r.partsMu.RLock()
	p := r.parts[tp{m.Topic, m.Partition}]
	r.partsMu.RUnlock()
	scan(p)
	scan(r.local)
	r.retireMu.Lock()
	retiring := slices.Clone(r.retiring) // includes the pseudo-partitions of parked-aggregate actions
	r.retireMu.Unlock()
	for _, p := range retiring {
		scan(p)
	}
}

// raise stores v in a if it is larger than what a holds.
func raise(a *atomic.Int64, v int64) {
	for cur := a.Load(); v > cur && !a.CompareAndSwap(cur, v); cur = a.Load() {
	}
}
