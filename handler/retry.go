package handler

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wowd/wowd/internal/ack"
)

// RetryPolicy says how [WithRetry] retries transient failures. The zero
// value retries forever, waiting 200ms after the first failure and doubling
// up to 30s.
type RetryPolicy struct {
	// MaxAttempts is the number of attempts per message, the first included,
	// before a transient failure is reported; 0 retries forever.
	MaxAttempts int
	// Initial is the wait after the first failure (default 200ms); it
	// doubles with each further failure, with jitter.
	Initial time.Duration
	// Max is the longest wait between attempts (default 30s, at least Initial).
	Max time.Duration
	// Observer, when set, is told of every retry (pass Deps.Observer).
	Observer Observer
}

// Default waits of a RetryPolicy.
const (
	DefaultRetryInitial = 200 * time.Millisecond
	DefaultRetryMax     = 30 * time.Second
)

// Backoff returns the wait after failed attempt n (1-based): Initial doubled
// per earlier failure, capped at Max, with equal jitter (half of it fixed,
// half random) so the retries of many messages spread out.
func (p RetryPolicy) Backoff(n int) time.Duration {
	initial, limit := p.Initial, p.Max
	if initial <= 0 {
		initial = DefaultRetryInitial
	}
	if limit <= 0 {
		limit = DefaultRetryMax
	}
	limit = max(limit, initial)
	d := initial
	for i := 1; i < n && d < limit; i++ {
		if d > limit/2 {
			d = limit
			break
		}
		d *= 2
	}
	d = min(d, limit)
	half := d / 2
	return half + rand.N(d-half+1)
}

// ErrClosed is the outcome of messages a handler gave up on because it was
// closed. It wraps context.Canceled, as the outcome of a message whose
// context was canceled does: wowd closes a handler only after its receivers
// stopped, so such messages are not committed and are delivered again after
// a restart.
var ErrClosed = fmt.Errorf("handler closed: %w", context.Canceled)

// WithRetry returns a handler that retries the Transient failures of h with
// exponential backoff and jitter, as p says. Success, Permanent and Skip
// outcomes are reported at once, and so is a failure wrapping [ErrClosed]
// (h was closed: retrying cannot help). A message that runs out of attempts
// is reported with its last error, classed Transient and marked with
// [WithAttempts].
//
// Waiting holds no goroutine (unless h blocks, below): a timer makes the
// next attempt, calling h.Handle from the timer's goroutine. When the
// message's context is canceled, the message is acknowledged at once with
// an error wrapping ctx.Err() and h is not called again for it; an attempt
// in progress is left to h, which should stop it promptly.
//
// Two optional methods let h take part in its retries:
//
//   - HandleAttempt(ctx context.Context, m *Message, attempt int, ack Ack) on
//     h: WithRetry calls it instead of Handle, with the number of the
//     attempt (1 for the first), for a target told which attempt it sees.
//     The numbers go on from the attempts of the message's earlier tries
//     ([AttemptsBefore]): when wowd holds a message whose attempts ran out
//     and tries it again, its attempts are numbered on, not from 1 again.
//     p.MaxAttempts counts the attempts of one call of Handle.
//   - RetryAfter() time.Duration on an error in the chain of a transient
//     failure: the least wait before the next attempt (a Retry-After
//     response header, say). The attempt waits for the longer of it and the
//     backoff, so a wait of 0 does not retry at once. p.Max does not cap
//     it; h does.
//
// The returned handler is a [Blocker] when h is. Then every attempt of a
// message runs on a goroutine of the bounded pool Handle was called on
// (wowd's blocking pool), so that h never runs more calls at once than the
// pool has goroutines, and each attempt holds its goroutine until h
// acknowledged it. Between attempts, when the context has a [Resumer] (as
// wowd's has), Handle returns and the goroutine serves other messages: at
// the end of the backoff the next attempt waits for a goroutine of the pool
// as a new message does (a message waiting there when the pool stops is
// acknowledged with [ErrClosed]). Without one, Handle waits out each backoff
// on its goroutine, holding it as a blocking call does, and returns once the
// message is acknowledged. Either way, when the context is canceled or the
// handler closed, Handle returns as soon as no h.Handle of the message runs
// (at once during a backoff), the message acknowledged as above.
//
// The returned handler is also a [Closer]: Close acknowledges the messages
// waiting to retry with an error wrapping [ErrClosed], then closes h if it
// is a Closer. h must acknowledge each attempt once; extra
// acknowledgements are ignored.
func WithRetry(h Handler, p RetryPolicy) Handler {
	r := &retrier{h: h, p: p, waiting: make(map[*retryCall]struct{}), closing: make(chan struct{})}
	r.numbered, _ = h.(attemptHandler)
	if b, ok := h.(Blocker); ok {
		r.blocking = b.Blocking()
	}
	return r
}

// attemptHandler is the optional method of a handler WithRetry wraps that
// takes the number of each attempt (see WithRetry).
type attemptHandler interface {
	HandleAttempt(ctx context.Context, m *Message, attempt int, ack Ack)
}

// retryAfterError is the optional method of a transient failure that sets
// the wait before the next attempt itself (see WithRetry).
type retryAfterError interface {
	error
	RetryAfter() time.Duration
}

// retrier is the handler WithRetry returns.
type retrier struct {
	h        Handler
	numbered attemptHandler // h, when it takes attempt numbers; else nil
	p        RetryPolicy
	blocking bool // h blocks: every call makes its attempts in Handle (inPlace)

	mu      sync.Mutex              // guards waiting, closed and the state, timer and wait of every call
	waiting map[*retryCall]struct{} // calls waiting out their backoff (on their timer, or in place)
	closed  bool                    // set by Close
	closing chan struct{}           // closed by Close: calls waiting in place stop waiting
	// starting counts the attempts being handed to h, first ones (Handle)
	// and those whose backoff ended (fire; for a blocking h, Handle's
	// whole run, retries included): Close waits for them before it closes
	// h, so h never gets an attempt after its Close. Added to under mu
	// while not closed, so before Close waits.
	starting sync.WaitGroup
}

var (
	_ Handler = (*retrier)(nil)
	_ Blocker = (*retrier)(nil)
	_ Closer  = (*retrier)(nil)
)

// retryState tells where a call is.
type retryState uint8

const (
	retryRunning retryState = iota // an attempt is in progress
	retryWaiting                   // in retrier.waiting, its timer running
	retryQueued                    // its backoff over, handed to the Resumer's pool: no attempt yet
	retryDone                      // outcome reported or being reported
)

// retryCall is one message on its way through WithRetry. Whoever moves it to
// retryDone (under retrier.mu) acknowledges it, so the ack is called once.
type retryCall struct {
	r    *retrier
	ctx  context.Context
	m    *Message
	ack  Ack
	stop func() bool // unregisters the ctx cancellation hook

	attempts atomic.Int64 // attempts started
	acked    atomic.Int64 // attempts acknowledged; guards against double acks
	// before is the attempts of earlier tries of the message
	// (AttemptsBefore of ctx): attempt n of this call is number before+n.
	before int
	// Where the message was, for a PanicObserver once it is acknowledged.
	context, topic string
	partition      int32
	offset         int64

	state retryState    // guarded by retrier.mu
	timer *time.Timer   // guarded by retrier.mu; set while retryWaiting, unless blocking without a resumer
	wait  time.Duration // guarded by retrier.mu; while retryWaiting in place: the backoff
	// next, when h blocks, receives a value each time an attempt's outcome
	// was taken (Complete): the call is then done or waiting in place.
	next chan struct{}
	// resumer, when h blocks and the context has one, runs the attempts
	// after a backoff on the pool; nil: they run in place.
	resumer Resumer
}

// Blocking reports whether the wrapped handler blocks.
func (r *retrier) Blocking() bool { return r.blocking }

// Handle makes the first attempt of m.
func (r *retrier) Handle(ctx context.Context, m *Message, ack Ack) {
	if err := ctx.Err(); err != nil {
		ack.Done(err)
		return
	}
	r.mu.Lock()
	closed := r.closed
	if !closed {
		r.starting.Add(1) // Close closes h only once h has this attempt
	}
	r.mu.Unlock()
	if closed {
		ack.Done(ErrClosed)
		return
	}
	defer r.starting.Done()
	c := &retryCall{r: r, ctx: ctx, m: m, ack: ack, before: AttemptsBefore(ctx),
		context: m.Context, topic: m.Topic, partition: m.Partition, offset: m.Offset}
	c.stop = context.AfterFunc(ctx, c.canceled)
	if !r.blocking {
		c.try()
		return
	}
	c.next = make(chan struct{}, 1)
	c.resumer, _ = ctx.Value(ResumerKey{}).(Resumer)
	c.inPlace()
}

// inPlace makes the attempts of c, for a blocking h, on the goroutine that
// called Handle, or that its Resumer runs the attempts after a backoff on:
// one of wowd's blocking pool, which bounds the calls of h at once. A
// timer's goroutine would not: during an outage every waiting message would
// call h on its own. It waits for each attempt's outcome, then out its
// backoff (on a timer, handing the goroutine back, when there is a
// Resumer), and returns once c is done, or at once when its context ends or
// the retrier closes: then c.canceled or Close acknowledge c if it waits,
// and the attempt in progress does if there is one.
func (c *retryCall) inPlace() {
	r := c.r
	for {
		if !c.try() {
			return // acknowledged without an attempt: its context had ended
		}
		select {
		case <-c.next:
		case <-c.ctx.Done():
			return
		case <-r.closing:
			return
		}
		r.mu.Lock()
		state, wait := c.state, c.wait
		if state == retryWaiting && c.resumer != nil {
			// canceled and Close stop this timer as they do a
			// non-blocking call's.
			c.timer = time.AfterFunc(wait, c.resume)
		}
		r.mu.Unlock()
		if state != retryWaiting || c.resumer != nil {
			return // acknowledged, or resumed on the pool after the backoff
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-c.ctx.Done():
			t.Stop()
			return
		case <-r.closing:
			t.Stop()
			return
		}
		r.mu.Lock()
		if c.state != retryWaiting { // canceled or closed meanwhile
			r.mu.Unlock()
			return
		}
		delete(r.waiting, c)
		c.state = retryRunning
		r.mu.Unlock()
	}
}

// Close acknowledges the messages waiting to retry, then closes the wrapped
// handler, once the attempts being handed to it (a Handle running, a
// backoff that just ended) have reached it (for a blocking handler, once
// they end, at most until ctx is done).
// Attempts in progress are reported when they end, without retry.
func (r *retrier) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	close(r.closing)
	dropped := make([]*retryCall, 0, len(r.waiting))
	for c := range r.waiting {
		c.stopTimer()
		c.state = retryDone
		dropped = append(dropped, c)
	}
	clear(r.waiting)
	r.mu.Unlock()
	for _, c := range dropped {
		c.finish(c.withAttempts(ErrClosed))
	}
	// A backoff that ended just before Close hands its attempt to h now:
	// h closes after it has it (and acknowledges it, closing, as one in
	// progress), not before. For a blocking h that is the attempt's end,
	// so no longer than ctx.
	handed := make(chan struct{})
	go func() {
		r.starting.Wait()
		close(handed)
	}()
	select {
	case <-handed:
	case <-ctx.Done():
	}
	if cl, ok := r.h.(Closer); ok {
		return cl.Close(ctx)
	}
	return nil
}

// try makes the next attempt of the running call c. It reports false when
// c's context had ended: c is then acknowledged, without an attempt, and
// no outcome is to be waited for (inPlace does not wait for Done, which a
// context that reports Err may close a moment later, or, if it breaks the
// contract, never).
func (c *retryCall) try() (attempted bool) {
	if err := c.ctx.Err(); err != nil {
		c.r.mu.Lock()
		c.state = retryDone
		c.r.mu.Unlock()
		c.finish(c.withAttempts(err))
		return false
	}
	n := c.attempts.Add(1)
	// Attempts after the first run on a timer's goroutine (unless h
	// blocks), where a panic of the wrapped handler would end the process:
	// it fails the message permanently instead. An attempt that already
	// reported its outcome keeps it, and the panic goes to the observer.
	defer func() {
		if v := recover(); v != nil {
			// An attempt was made: its outcome, reported before the panic
			// or the panic's, decides what comes next (a retry after a
			// transient one is waited for like any other).
			attempted = true
			err := Recovered(v, debug.Stack())
			if c.complete(uint64(n), err) {
				return
			}
			if po, ok := c.r.p.Observer.(PanicObserver); ok {
				po.PanickedAfterOutcome(c.context, c.topic, c.partition, c.offset, err)
			}
		}
	}()
	if c.r.numbered != nil {
		c.r.numbered.HandleAttempt(c.ctx, c.m, c.before+int(n), ack.New(c, uint64(n)))
		return true
	}
	c.r.h.Handle(c.ctx, c.m, ack.New(c, uint64(n)))
	return true
}

// Complete implements ack.Completer: the outcome of attempt token.
func (c *retryCall) Complete(token uint64, err error) { c.complete(token, err) }

// complete is Complete; it reports false for a second outcome of the
// attempt, which it ignores.
func (c *retryCall) complete(token uint64, err error) bool {
	n := int64(token)
	if !c.acked.CompareAndSwap(n-1, n) {
		return false // a second acknowledgement of this attempt
	}
	if c.next != nil {
		defer c.taken()
	}
	r := c.r
	class, _ := Classify(err)
	if err == nil || class != Transient || errors.Is(err, ErrClosed) {
		c.done(WithAttempts(int(n), err))
		return true
	}
	if ctxErr := c.ctx.Err(); ctxErr != nil {
		c.done(WithAttempts(int(n), fmt.Errorf("%w (last attempt: %w)", ctxErr, err)))
		return true
	}
	if r.p.MaxAttempts > 0 && int(n) >= r.p.MaxAttempts {
		c.done(WithAttempts(int(n), Classed(Transient, fmt.Errorf("giving up after %d attempts: %w", n, err))))
		return true
	}
	// A wait the failure asks for lengthens the backoff, never shortens
	// it: a target answering Retry-After: 0 would otherwise be retried as
	// fast as it answers.
	wait := r.p.Backoff(int(n))
	if ra, ok := errors.AsType[retryAfterError](err); ok {
		wait = max(ra.RetryAfter(), wait)
	}
	// The observer (wowd's receiver: its retried count, failure streak
	// and try deadline) hears of the retry while c still runs: canceled
	// leaves a running call to this outcome, so c cannot be acknowledged,
	// and its message handed back, before the observer is told about it.
	// It is told only when the retry looks certain (closed or canceled
	// before, the message is acknowledged instead), and before the next
	// attempt can start (the timer starts after it). A Close or a cancel
	// during the call is found below: the message is acknowledged then,
	// and the retry the observer was told of does not come. (Outside
	// r.mu: the observer takes locks of its own.)
	if stop := c.abandon(n, err); stop {
		return true
	}
	if r.p.Observer != nil {
		r.p.Observer.Retrying(c.m, c.before+int(n), err, wait)
	}
	r.mu.Lock()
	if r.closed || c.ctx.Err() != nil {
		r.mu.Unlock()
		c.abandon(n, err)
		return true
	}
	c.state = retryWaiting
	r.waiting[c] = struct{}{}
	if r.blocking {
		c.wait = wait // inPlace waits it out, once this Complete returned (taken)
	} else {
		c.timer = time.AfterFunc(wait, c.fire)
	}
	r.mu.Unlock()
	return true
}

// abandon acknowledges c, whose attempt n failed with err, instead of
// retrying it, if the retrier closed or c's context ended, and reports
// whether it did. Once c waits (under r.mu), canceled and Close
// acknowledge it instead.
func (c *retryCall) abandon(n int64, err error) bool {
	r := c.r
	r.mu.Lock()
	var why error
	switch {
	case r.closed:
		why = ErrClosed
	case c.ctx.Err() != nil:
		// Cancelled since Complete's first check: canceled ran then, found
		// the call running and left it to this outcome.
		why = c.ctx.Err()
	default:
		r.mu.Unlock()
		return false
	}
	c.state = retryDone
	r.mu.Unlock()
	c.finish(WithAttempts(int(n), fmt.Errorf("%w (last attempt: %w)", why, err)))
	return true
}

// taken tells inPlace, if it waits, that an attempt's outcome was taken.
// Once per attempt, and inPlace takes each before the next attempt: the
// buffer always has room.
func (c *retryCall) taken() {
	select {
	case c.next <- struct{}{}:
	default:
	}
}

// stopTimer stops the timer of c, if it waits on one. r.mu held.
func (c *retryCall) stopTimer() {
	if c.timer != nil {
		c.timer.Stop()
	}
}

// endWait moves c, waiting out its backoff, to next (running, or queued
// for the pool), and counts its next attempt as being handed to h
// (starting: the caller calls Done). It reports false if c no longer waits
// (canceled or closed meanwhile).
func (c *retryCall) endWait(next retryState) bool {
	r := c.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.state != retryWaiting {
		return false
	}
	delete(r.waiting, c)
	c.timer = nil
	c.state = next
	r.starting.Add(1)
	return true
}

// fire runs when the backoff of c is over.
func (c *retryCall) fire() {
	if !c.endWait(retryRunning) {
		return
	}
	defer c.r.starting.Done()
	c.try()
}

// resume runs when the backoff of c, a blocking call with a Resumer, is
// over: its next attempts wait for a goroutine of the pool, queued. Close
// waits for them as for an attempt being handed to h (starting); if the
// pool stops first, or the retrier closed while they waited, c is
// acknowledged with ErrClosed instead; canceled acknowledges a queued call
// at once (no attempt is in progress), and the pool then has nothing to run.
func (c *retryCall) resume() {
	if !c.endWait(retryQueued) {
		return
	}
	r := c.r
	c.resumer.Resume(func() {
		defer r.starting.Done()
		r.mu.Lock()
		switch {
		case c.state != retryQueued: // canceled meanwhile: acknowledged
			r.mu.Unlock()
			return
		case r.closed:
			c.state = retryDone
			r.mu.Unlock()
			c.finish(c.withAttempts(ErrClosed))
			return
		}
		c.state = retryRunning
		r.mu.Unlock()
		c.inPlace()
	}, func() {
		defer r.starting.Done()
		r.mu.Lock()
		if c.state != retryQueued {
			r.mu.Unlock()
			return
		}
		c.state = retryDone
		r.mu.Unlock()
		c.finish(c.withAttempts(ErrClosed))
	})
}

// canceled runs when the context of c is canceled. A waiting or queued
// call is acknowledged at once; a running one when its attempt ends.
func (c *retryCall) canceled() {
	r := c.r
	r.mu.Lock()
	if c.state != retryWaiting && c.state != retryQueued {
		r.mu.Unlock()
		return
	}
	c.stopTimer()
	delete(r.waiting, c)
	c.state = retryDone
	r.mu.Unlock()
	c.finish(c.withAttempts(c.ctx.Err()))
}

// withAttempts marks err with the attempts c made, if any.
func (c *retryCall) withAttempts(err error) error {
	if n := c.attempts.Load(); n > 0 {
		return WithAttempts(int(n), err)
	}
	return err
}

// done reports the outcome of the running call c.
func (c *retryCall) done(err error) {
	c.r.mu.Lock()
	c.state = retryDone
	c.r.mu.Unlock()
	c.finish(err)
}

// finish reports the outcome of c, which its caller moved to retryDone.
func (c *retryCall) finish(err error) {
	c.stop()
	c.ack.Done(err)
}
