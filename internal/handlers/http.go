package handlers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/redact"
	"github.com/wowd/wowd/internal/ring"
)

// maxRetryAfter caps the wait a Retry-After response header can ask for.
const maxRetryAfter = 5 * time.Minute

// httpSink POSTs messages to one URL.
//
// It has two layers. handler.WithRetry, the SDK's retry state machine, owns
// each message from Handle to its outcome: it makes the attempts, waits
// between them on a timer (no goroutine) for the backoff or for what a
// Retry-After response header asked, tells the Observer of every retry,
// gives up after max-attempts, and acknowledges at once a message waiting to
// retry when its context is canceled or the sink closed.
//
// Under it the sink makes single attempts (sinkAttempts). An attempt goes
// at once to a worker goroutine while fewer than cfg.MaxConcurrency
// attempts run (0: no limit of the sink's own: wowd's window,
// wow.dispatch.max-in-flight per receiver, bounds the messages a sink
// holds, and a message has at most one attempt running): to the worker
// that went idle last, or to a new one. At the limit it is queued, and a
// worker that ends an attempt takes the oldest queued one before it goes
// idle. A worker idle for workerIdle stops. A worker waits for the rate
// limiter, if there is one, then makes one request. A retry is a new
// attempt, started or queued as any other, so max-concurrency and
// rate-limit count retries. An attempt is in exactly one place at a time,
// told by its state, which only changes under mu; whoever moves it to
// callDone reports its outcome, so each attempt is acknowledged once.
//
// The queue is unbounded: the window bounds it too.
//
// With batch.max-messages set, an attempt joins the batch being filled
// instead, and a cut batch is started or queued as one attempt (see
// http_batch.go).
type httpSink struct {
	retry retrying // handler.WithRetry over sinkAttempts{s}; Handle and Close go through it

	cfg      HTTPConfig
	target   *http.Request // a request to cfg.URL, parsed once: newRequest copies its URL and Host
	redacted string        // url without its password and query values, for errors
	static   http.Header   // headers and headers-from-env, resolved
	client   *http.Client
	live     atomic.Pointer[httpLive] // the settings a reload may change (http_reload.go)
	log      *zap.Logger
	// waits, when the Observer is one, is told of the attempts that wait
	// for max-concurrency or the rate limiter, whose wait handler.timeout
	// does not count (with batch on, the members of a batch whose request
	// waits; nil without such an Observer). An attempt's reports come
	// outside mu; a batch member's under it, since its cancellation
	// acknowledges it at once (abandon): the observer must not call the
	// sink (wowd's does not: it reads atomics of the receiver's).
	waits handler.WaitObserver

	// stopping is closed by Close: workers waiting for the rate limiter
	// give up their attempt.
	stopping chan struct{}

	// limit is the sink's rate limiter (rate-limit, rate-burst), for its
	// life: a reload changes its settings in place (setLive, under mu:
	// lock order mu → limiter.mu; the limiter takes no other lock).
	limit *limiter

	// aborted is set when Close stops waiting for requests in flight; it
	// cancels them.
	aborted atomic.Bool

	workers sync.WaitGroup // one per worker goroutine

	mu      sync.Mutex           // guards the fields below and the state of every call
	queue   ring.Ring[*call]     // attempts waiting for a worker, in order; may hold abandoned calls, skipped
	busy    int                  // workers with an attempt; the queue holds no live call unless busy is at the limit
	idle    []*worker            // workers waiting for an attempt, the one idle longest first
	all     map[*worker]struct{} // every worker, busy or idle
	reaping *time.Timer          // stops the workers idle for idleFor; set while some are idle
	closed  bool                 // set by Close; nothing is queued or started after it
	batcher batcher              // with batch.max-messages: the batch being filled (http_batch.go)

	idleFor time.Duration // workerIdle; tests shorten it
}

// workerIdle is how long a worker waits for an attempt before it stops.
const workerIdle = 30 * time.Second

// worker is a goroutine making attempts, one at a time.
type worker struct {
	next      chan *call // an attempt given to it while idle; nil tells it to stop
	idleSince time.Time  // guarded by sink.mu: when it went idle

	mu     sync.Mutex         // guards cancel
	cancel context.CancelFunc // of its request in flight, if any
}

var (
	_ handler.Handler = (*httpSink)(nil)
	_ handler.Closer  = (*httpSink)(nil)
)

// retrying is what handler.WithRetry returns.
type retrying interface {
	handler.Handler
	handler.Closer
}

// callState tells where an attempt is.
type callState uint8

const (
	callNew     callState = iota // being started by HandleAttempt
	callQueued                   // in sink.queue
	callRunning                  // a worker makes it
	callDone                     // outcome reported or being reported
)

// call is one attempt of a message on its way through the sink, or, with
// batching, the request of a batch of them (a carrier: batch is set, and
// the attempts it carries are its members). Workers and the queue handle
// carriers as they handle attempts: one request each.
type call struct {
	ctx     context.Context // of the message; canceling it abandons the attempt
	m       *handler.Message
	ack     handler.Ack // the attempt's, given by handler.WithRetry
	stop    func() bool // unregisters the ctx cancellation hook; nil without one
	attempt int         // 1 for the first attempt of m
	// waited: Waiting was reported for this attempt (sink.waits), and
	// Started is due as its request starts. Written before the call is
	// placed, then only by the worker running it (a member of a batch:
	// under mu, where its reports are made).
	waited bool

	// With batching: a member's CloudEvent and its id, or a carrier's batch.
	event   []byte
	id      string
	batch   *batch
	batched bool   // a member: its request may be in flight when its ctx is canceled
	inBatch *batch // a member's batch once cut, while the member is queued in it
	// carrier is a running member's carrier; running and cancelReq are a
	// carrier's members whose request is in flight and not done, and the
	// cancellation of that request: once none is left, nothing waits for
	// it (all guarded by sink.mu).
	carrier   *call
	running   int
	cancelReq context.CancelFunc

	state callState // guarded by sink.mu
}

// newHTTPSink builds a sink from a validated configuration. It reads the
// environment variables and files the configuration names; their errors
// name the header and the source, never a value.
func newHTTPSink(cfg HTTPConfig, deps handler.Deps) (*httpSink, error) {
	u, _ := url.Parse(cfg.URL) // checked by Validate
	if err := cfg.FitTry(deps.Timeout); err != nil {
		return nil, err
	}
	log := deps.Logger
	if log == nil {
		log = zap.NewNop()
	}
	static, errs := staticHeaders(cfg)
	live, err := newLive(cfg, deps.Timeout, log, nil)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...) // every problem of both, at once
	}
	tr, err := newTransport(cfg, deps.Dial)
	if err != nil {
		return nil, err
	}
	target, err := http.NewRequest(http.MethodPost, cfg.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("url: %w", err) // checked by Validate
	}
	s := &httpSink{
		cfg:      cfg,
		target:   target,
		redacted: redact.URL(u.String()),
		static:   static,
		client: &http.Client{
			Transport:     redirectGuard{next: tr},
			CheckRedirect: checkRedirect,
		},
		log:      log,
		stopping: make(chan struct{}),
		limit:    newLimiter(cfg.RateLimit, cfg.RateBurst),
		all:      make(map[*worker]struct{}),
		idleFor:  workerIdle,
	}
	s.live.Store(live)
	if w, ok := deps.Observer.(handler.WaitObserver); ok {
		s.waits = w
	}
	s.retry = handler.WithRetry(sinkAttempts{s}, retryPolicy(cfg, deps.Observer)).(retrying)
	return s, nil
}

// retryPolicy is how the sink retries transient failures: max-attempts,
// backoff-initial doubling up to backoff-max, the Observer told of each
// retry.
func retryPolicy(cfg HTTPConfig, obs handler.Observer) handler.RetryPolicy {
	return handler.RetryPolicy{MaxAttempts: cfg.MaxAttempts, Initial: cfg.BackoffInitial, Max: cfg.BackoffMax, Observer: obs}
}

// Handle starts the first attempt of m and returns at once; a worker POSTs
// it.
func (s *httpSink) Handle(ctx context.Context, m *handler.Message, ack handler.Ack) {
	s.retry.Handle(ctx, m, ack)
}

// Close stops the sink. Messages waiting to retry, queued attempts and
// attempts waiting for the rate limiter are acknowledged at once with an
// error wrapping handler.ErrClosed (and so context.Canceled); requests in
// flight may finish until ctx is done, then they are canceled and
// acknowledged the same way. Close returns when every worker has stopped.
func (s *httpSink) Close(ctx context.Context) error {
	return s.retry.Close(ctx)
}

// sinkAttempts is the sink as handler.WithRetry sees it: each call queues
// one attempt.
type sinkAttempts struct{ s *httpSink }

// Handle starts the first attempt of m. (WithRetry calls HandleAttempt.)
func (a sinkAttempts) Handle(ctx context.Context, m *handler.Message, ack handler.Ack) {
	a.s.start(ctx, m, 1, ack)
}

// HandleAttempt starts attempt of m.
func (a sinkAttempts) HandleAttempt(ctx context.Context, m *handler.Message, attempt int, ack handler.Ack) {
	a.s.start(ctx, m, attempt, ack)
}

// Close stops the workers; handler.WithRetry calls it from the sink's Close.
func (a sinkAttempts) Close(ctx context.Context) error { return a.s.shutdown(ctx) }

// start gives attempt of m to a worker, or queues it when max-concurrency
// attempts run, and returns at once.
func (s *httpSink) start(ctx context.Context, m *handler.Message, attempt int, ack handler.Ack) {
	if err := ctx.Err(); err != nil {
		ack.Done(s.wrap(err))
		return
	}
	if s.cfg.Batch.MaxMessages > 0 {
		s.startBatched(ctx, m, attempt, ack)
		return
	}
	c := &call{ctx: ctx, m: m, ack: ack, attempt: attempt}
	s.mu.Lock()
	if s.waits != nil && !s.closed && s.full() {
		// It will queue: said before any worker can take it, so that its
		// Started follows its Waiting.
		s.mu.Unlock()
		c.waited = true
		s.waits.Waiting(ctx, m)
		s.mu.Lock()
	}
	if s.closed {
		c.state = callDone
		s.mu.Unlock()
		s.finish(c, s.wrap(handler.ErrClosed))
		return
	}
	h := s.place(c)
	s.mu.Unlock()
	s.hand(h)
}

// handoff is a call placed on a worker, to hand over once sink.mu is
// released.
type handoff struct {
	c     *call
	w     *worker // nil: nothing to hand over (the call was queued)
	spawn bool    // w is new: start its goroutine
}

// place gives the new call c (an attempt or a carrier) to a worker, or
// queues it when max-concurrency attempts run. Called with mu held; the
// caller passes what it returns to hand once it released mu.
func (s *httpSink) place(c *call) handoff {
	if s.full() {
		c.state = callQueued
		s.queue.Push(c)
		if c.batch == nil && c.stop == nil {
			// Canceling its context acknowledges it in the queue (at
			// once if it is canceled already). A running attempt ends
			// with its request, made with the context; a member of a
			// batch has its hook already.
			c.stop = context.AfterFunc(c.ctx, func() { s.abandon(c) })
		}
		return handoff{}
	}
	for s.pop() != nil { // below the limit, the queue holds only abandoned calls
	}
	return s.assign(c)
}

// full reports whether max-concurrency attempts run: a new one queues.
// Called with mu held.
func (s *httpSink) full() bool {
	limit := s.live.Load().maxConcurrency
	return limit > 0 && s.busy >= limit
}

// assign makes c running on a worker: the one that went idle last, or a new
// one. Called with mu held; the caller passes what it returns to hand once
// it released mu.
func (s *httpSink) assign(c *call) handoff {
	c.state = callRunning
	s.busy++
	if n := len(s.idle); n > 0 {
		w := s.idle[n-1] // the last to go idle: its stack is grown, its memory warm
		s.idle[n-1] = nil
		s.idle = s.idle[:n-1]
		return handoff{c: c, w: w}
	}
	w := &worker{next: make(chan *call, 1)}
	s.all[w] = struct{}{}
	s.workers.Add(1)
	return handoff{c: c, w: w, spawn: true}
}

// hand hands a placed call to its worker. Called without mu.
func (s *httpSink) hand(h handoff) {
	switch {
	case h.w == nil:
	case h.spawn:
		go s.work(h.w, h.c)
	default:
		h.w.next <- h.c // idle, it waits for nothing else: its channel is empty
	}
}

// shutdown acknowledges the queued attempts and the ones waiting for the
// rate limiter, lets requests in flight finish until ctx is done, then
// cancels them, and returns when every worker has stopped.
func (s *httpSink) shutdown(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.stopping)
	dropped := s.batcher.drop()
	for c := s.pop(); c != nil; c = s.pop() {
		if c.state == callQueued {
			c.state = callDone
			dropped = append(dropped, c)
		}
	}
	s.stopIdle(len(s.idle))
	s.mu.Unlock()

	for _, c := range dropped {
		s.finish(c, s.wrap(handler.ErrClosed))
	}

	stopped := make(chan struct{})
	go func() {
		s.workers.Wait()
		close(stopped)
	}()
	var err error
	select {
	case <-stopped:
	case <-ctx.Done():
		// An error only if an attempt was under way: idle workers told to
		// stop may not have returned yet when a stop that ran past its
		// deadline (its final commit or leave) closes the sink.
		if n := s.abortRequests(); n > 0 {
			err = fmt.Errorf("http sink: %d requests in flight canceled: %w", n, ctx.Err())
		}
		<-stopped // the canceled requests return promptly
	}
	s.client.CloseIdleConnections()
	return err
}

// abortRequests cancels the requests in flight, and the ones workers are
// about to make; it returns how many workers had an attempt.
func (s *httpSink) abortRequests() (busy int) {
	s.aborted.Store(true)
	s.mu.Lock()
	busy = s.busy
	var cancels []context.CancelFunc
	for w := range s.all {
		w.mu.Lock()
		if w.cancel != nil {
			cancels = append(cancels, w.cancel)
		}
		w.mu.Unlock()
	}
	s.mu.Unlock()
	for _, cancel := range cancels {
		cancel()
	}
	return busy
}

// work makes the running attempt c, then the ones it is given, until it is
// told to stop.
func (s *httpSink) work(w *worker, c *call) {
	defer s.workers.Done()
	for ; c != nil; c = s.next(w) {
		s.attempt(w, c)
	}
}

// pop takes the oldest queued call, nil when none is queued; an emptied
// queue that grew in a burst gives its memory back. Called with mu held.
func (s *httpSink) pop() *call {
	c, _ := s.queue.Pop()
	if s.queue.Len() == 0 && s.queue.Cap() > 1024 {
		s.queue.Release()
	}
	return c
}

// next returns the next attempt of worker w, which ended one: the oldest
// queued, or else the one it is given once idle; nil means stop.
func (s *httpSink) next(w *worker) *call {
	s.mu.Lock()
	for c := s.popUnder(); c != nil; c = s.popUnder() {
		if c.state == callQueued { // others were abandoned while queued
			c.state = callRunning
			s.mu.Unlock()
			return c
		}
	}
	s.busy--
	if s.closed {
		delete(s.all, w)
		s.mu.Unlock()
		return nil
	}
	w.idleSince = time.Now()
	s.idle = append(s.idle, w)
	if s.reaping == nil {
		s.reaping = time.AfterFunc(s.idleFor, s.reap)
	}
	s.mu.Unlock()
	return <-w.next
}

// reap stops the workers idle for idleFor, and comes back for the others.
func (s *httpSink) reap() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reaping = nil
	if s.closed {
		return
	}
	cutoff := time.Now().Add(-s.idleFor)
	n := 0
	for n < len(s.idle) && !s.idle[n].idleSince.After(cutoff) {
		n++
	}
	s.stopIdle(n)
	if len(s.idle) > 0 {
		s.reaping = time.AfterFunc(time.Until(s.idle[0].idleSince.Add(s.idleFor)), s.reap)
	}
}

// stopIdle stops the n workers idle longest. Called with mu held.
func (s *httpSink) stopIdle(n int) {
	for _, w := range s.idle[:n] {
		delete(s.all, w)
		w.next <- nil
	}
	rest := copy(s.idle, s.idle[n:])
	clear(s.idle[rest:])
	s.idle = s.idle[:rest]
	if len(s.idle) == 0 && s.reaping != nil {
		s.reaping.Stop()
		s.reaping = nil
	}
}

// attempt makes the running attempt c and reports its outcome. Whether a
// failure is retried, and when, is handler.WithRetry's decision; a request
// ended by the message's cancellation or by Close reports that instead of
// what it got.
//
// It reads the sink's live settings once, as it starts, and the attempt
// uses only them: the rate limiter it waits for, the request-timeout and
// the headers-from-file of its request are of one version, whatever
// reload lands meanwhile.
func (s *httpSink) attempt(w *worker, c *call) {
	live := s.live.Load()
	if c.batch != nil {
		s.attemptBatch(w, c, live)
		return
	}
	if err := s.waitTurn(c); err != nil {
		s.complete(c, s.wrap(err))
		return
	}
	if c.waited {
		c.waited = false
		s.waits.Started(c.ctx, c.m) // its request starts now
	}
	err := s.post(w, c, live)
	switch {
	case err == nil:
		s.complete(c, nil)
	case c.ctx.Err() != nil:
		s.complete(c, s.wrap(c.ctx.Err()))
	case s.aborted.Load():
		s.complete(c, s.wrap(handler.ErrClosed))
	default:
		s.complete(c, err)
	}
}

// waitTurn waits until the sink's rate limiter lets the running attempt c
// make a request (at once without rate-limit). A reload of rate-limit or
// rate-burst voids its slot: it reserves again under the new settings. It
// returns early with the error of c's context, or handler.ErrClosed when
// the sink is closing.
func (s *httpSink) waitTurn(c *call) error {
	for {
		if err := c.ctx.Err(); err != nil {
			return err // given up already (a batch, all its members): no turn taken
		}
		d, slot := s.limit.reserve(time.Now())
		if d <= 0 {
			return nil
		}
		if s.waits != nil {
			s.reportWaiting(c)
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
			return nil
		case <-slot.changed:
			t.Stop() // void: reserve again
		case <-c.ctx.Done():
			t.Stop()
			s.limit.cancel(slot, time.Now())
			return c.ctx.Err()
		case <-s.stopping:
			t.Stop()
			s.limit.cancel(slot, time.Now())
			return handler.ErrClosed
		}
	}
}

// reportWaiting reports to the WaitObserver that the running call c, an
// attempt or a carrier's members still queued, waits for the rate limiter;
// an attempt reported waiting already is not reported again.
func (s *httpSink) reportWaiting(c *call) {
	if c.batch == nil {
		if !c.waited {
			c.waited = true
			s.waits.Waiting(c.ctx, c.m)
		}
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range c.batch.calls {
		if m.state == callQueued && !m.waited {
			// Under mu: a member acknowledged (abandon) is done, and no
			// report may follow its acknowledgement.
			m.waited = true
			s.waits.Waiting(m.ctx, m.m)
		}
	}
}

// abandon runs when the context of c is canceled. A queued attempt is
// acknowledged at once; a running one by its worker when the canceled
// request returns.
func (s *httpSink) abandon(c *call) {
	s.mu.Lock()
	// A queued call stays in the queue; next skips it. A member of a batch
	// stays in its batch, which leaves it out; its request may be in
	// flight, for other messages too: its outcome is ignored.
	if c.state != callQueued && (!c.batched || c.state != callRunning) {
		s.mu.Unlock()
		return
	}
	var cancelReq context.CancelFunc
	if car := c.carrier; car != nil && c.state == callRunning {
		if car.running--; car.running == 0 {
			cancelReq = car.cancelReq
		}
	}
	if b := c.inBatch; b != nil && c.state == callQueued {
		if b.queued--; b.queued == 0 {
			cancelReq = b.endWait // its carrier waits for nobody now
		}
	}
	c.state = callDone
	s.mu.Unlock()
	if cancelReq != nil {
		// Every member of the request in flight was given up: it is
		// canceled, as an unbatched one is, before the messages can be
		// delivered again.
		cancelReq()
	}
	c.ack.Done(s.wrap(c.ctx.Err()))
}

// complete reports the outcome of the running attempt c.
func (s *httpSink) complete(c *call, err error) {
	s.mu.Lock()
	c.state = callDone
	s.mu.Unlock()
	s.finish(c, err)
}

// finish reports the outcome of c, which its caller moved to callDone: of
// a carrier, the outcome of each member not done yet.
func (s *httpSink) finish(c *call, err error) {
	if c.batch != nil {
		s.settleAll(c.batch.calls, err)
		return
	}
	if c.stop != nil {
		c.stop()
	}
	c.ack.Done(err)
}

// wrap says err happened POSTing to the sink's URL.
func (s *httpSink) wrap(err error) error {
	return fmt.Errorf("POST %s: %w", s.redacted, err)
}

// retryAfterError is a failure whose response asked, with a Retry-After
// header, for the wait before the next attempt: handler.WithRetry waits the
// longer of it and its backoff.
type retryAfterError struct {
	err  error
	wait time.Duration // at most maxRetryAfter
}

func (e *retryAfterError) Error() string             { return e.err.Error() }
func (e *retryAfterError) Unwrap() error             { return e.err }
func (e *retryAfterError) RetryAfter() time.Duration { return e.wait }
