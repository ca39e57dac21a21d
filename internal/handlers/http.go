package handlers

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/wowd/wowd/handler"
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
// Under it the sink makes single attempts (sinkAttempts). An attempt is
// queued; a fixed pool of cfg.MaxConcurrency worker goroutines, started by
// newHTTPSink and stopped by Close, takes attempts from the queue in order
// and makes one request each, after waiting for the rate limiter if there is
// one. A retry is a new attempt at the back of the queue, so max-concurrency
// and rate-limit count retries. An attempt is in exactly one place at a
// time, told by its state, which only changes under mu; whoever moves it to
// callDone reports its outcome, so each attempt is acknowledged once.
//
// The queue is unbounded: wowd's window (wow.dispatch.max-in-flight) bounds
// the messages a sink holds.
type httpSink struct {
	retry retrying // handler.WithRetry over sinkAttempts{s}; Handle and Close go through it

	cfg      HTTPConfig
	target   *http.Request // a request to cfg.URL, parsed once: newRequest copies its URL and Host
	redacted string        // url without its password, for errors
	static   http.Header   // headers and headers-from-env, resolved
	files    []*fileHeader // headers-from-file
	client   *http.Client
	limit    *limiter // nil without rate-limit
	log      *zap.Logger

	// stopping is closed by Close: workers waiting for the rate limiter
	// give up their attempt.
	stopping chan struct{}

	// closing is canceled when Close stops waiting for requests in flight;
	// it cancels them.
	closing context.Context
	abort   context.CancelFunc

	workers sync.WaitGroup

	mu     sync.Mutex       // guards queue, closed and the state of every call
	work   sync.Cond        // signaled, with mu, when a call is queued or the sink closes
	queue  ring.Ring[*call] // attempts to make, in order; may hold abandoned calls, skipped
	closed bool             // set by Close; nothing is queued after it
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
	callNew     callState = iota // being queued by HandleAttempt
	callQueued                   // in sink.queue
	callRunning                  // a worker is making it
	callDone                     // outcome reported or being reported
)

// call is one attempt of a message on its way through the sink.
type call struct {
	ctx     context.Context // of the message; canceling it abandons the attempt
	m       *handler.Message
	ack     handler.Ack // the attempt's, given by handler.WithRetry
	stop    func() bool // unregisters the ctx cancellation hook
	attempt int         // 1 for the first attempt of m

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
	static, files, err := resolveHeaders(cfg, log)
	if err != nil {
		return nil, err
	}
	tr, err := newTransport(cfg)
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
		redacted: u.Redacted(),
		static:   static,
		files:    files,
		client: &http.Client{
			Transport:     tr,
			CheckRedirect: checkRedirect,
		},
		log:      log,
		stopping: make(chan struct{}),
	}
	if cfg.RateLimit > 0 {
		s.limit = newLimiter(cfg.RateLimit, cfg.RateBurst)
	}
	s.retry = handler.WithRetry(sinkAttempts{s}, retryPolicy(cfg, deps.Observer)).(retrying)
	s.work.L = &s.mu
	s.closing, s.abort = context.WithCancel(context.Background())
	s.workers.Add(cfg.MaxConcurrency)
	for range cfg.MaxConcurrency {
		go s.worker()
	}
	return s, nil
}

// retryPolicy is how the sink retries transient failures: max-attempts,
// backoff-initial doubling up to backoff-max, the Observer told of each
// retry.
func retryPolicy(cfg HTTPConfig, obs handler.Observer) handler.RetryPolicy {
	return handler.RetryPolicy{MaxAttempts: cfg.MaxAttempts, Initial: cfg.BackoffInitial, Max: cfg.BackoffMax, Observer: obs}
}

// Handle queues the first attempt of m and returns at once; a worker POSTs
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

// Handle queues the first attempt of m. (WithRetry calls HandleAttempt.)
func (a sinkAttempts) Handle(ctx context.Context, m *handler.Message, ack handler.Ack) {
	a.s.enqueue(ctx, m, 1, ack)
}

// HandleAttempt queues attempt of m.
func (a sinkAttempts) HandleAttempt(ctx context.Context, m *handler.Message, attempt int, ack handler.Ack) {
	a.s.enqueue(ctx, m, attempt, ack)
}

// Close stops the workers; handler.WithRetry calls it from the sink's Close.
func (a sinkAttempts) Close(ctx context.Context) error { return a.s.shutdown(ctx) }

// enqueue queues attempt of m and returns at once.
func (s *httpSink) enqueue(ctx context.Context, m *handler.Message, attempt int, ack handler.Ack) {
	if err := ctx.Err(); err != nil {
		ack.Done(s.wrap(err))
		return
	}
	c := &call{ctx: ctx, m: m, ack: ack, attempt: attempt}
	c.stop = context.AfterFunc(ctx, func() { s.abandon(c) })
	s.mu.Lock()
	if s.closed {
		c.state = callDone
		s.mu.Unlock()
		s.finish(c, s.wrap(handler.ErrClosed))
		return
	}
	c.state = callQueued
	s.queue.Push(c)
	s.mu.Unlock()
	s.work.Signal()
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
	var dropped []*call
	for c := s.pop(); c != nil; c = s.pop() {
		if c.state == callQueued {
			c.state = callDone
			dropped = append(dropped, c)
		}
	}
	s.mu.Unlock()
	s.work.Broadcast()

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
		s.abort()
		<-stopped // the canceled requests return promptly
		err = fmt.Errorf("http sink: requests in flight canceled: %w", ctx.Err())
	}
	s.abort()
	s.client.CloseIdleConnections()
	return err
}

// worker makes attempts until the sink is closed and its queue is empty.
func (s *httpSink) worker() {
	defer s.workers.Done()
	for {
		c := s.next()
		if c == nil {
			return
		}
		s.attempt(c)
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

// next takes the next queued attempt, waiting for one; nil means stop.
func (s *httpSink) next() *call {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		for c := s.pop(); c != nil; c = s.pop() {
			if c.state == callQueued { // others were abandoned while queued
				c.state = callRunning
				return c
			}
		}
		if s.closed {
			return nil
		}
		s.work.Wait()
	}
}

// attempt makes the running attempt c and reports its outcome. Whether a
// failure is retried, and when, is handler.WithRetry's decision; a request
// ended by the message's cancellation or by Close reports that instead of
// what it got.
func (s *httpSink) attempt(c *call) {
	if err := s.waitTurn(c); err != nil {
		s.complete(c, s.wrap(err))
		return
	}
	err := s.post(c)
	switch {
	case err == nil:
		s.complete(c, nil)
	case c.ctx.Err() != nil:
		s.complete(c, s.wrap(c.ctx.Err()))
	case s.closing.Err() != nil:
		s.complete(c, s.wrap(handler.ErrClosed))
	default:
		s.complete(c, err)
	}
}

// waitTurn waits until the rate limiter lets the running attempt c make a
// request. It returns early with the error of c's context, or
// handler.ErrClosed when the sink is closing.
func (s *httpSink) waitTurn(c *call) error {
	if s.limit == nil {
		return nil
	}
	d := s.limit.reserve(time.Now())
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-c.ctx.Done():
		return c.ctx.Err()
	case <-s.stopping:
		return handler.ErrClosed
	}
}

// abandon runs when the context of c is canceled. A queued attempt is
// acknowledged at once; a running one by its worker when the canceled
// request returns.
func (s *httpSink) abandon(c *call) {
	s.mu.Lock()
	if c.state != callQueued { // a queued call stays in the queue; next skips it
		s.mu.Unlock()
		return
	}
	c.state = callDone
	s.mu.Unlock()
	c.ack.Done(s.wrap(c.ctx.Err()))
}

// complete reports the outcome of the running attempt c.
func (s *httpSink) complete(c *call, err error) {
	s.mu.Lock()
	c.state = callDone
	s.mu.Unlock()
	s.finish(c, err)
}

// finish reports the outcome of c, which its caller moved to callDone.
func (s *httpSink) finish(c *call, err error) {
	c.stop()
	c.ack.Done(err)
}

// wrap says err happened POSTing to the sink's URL.
func (s *httpSink) wrap(err error) error {
	return fmt.Errorf("POST %s: %w", s.redacted, err)
}

// retryAfterError is a failure whose response asked, with a Retry-After
// header, for the wait before the next attempt: handler.WithRetry waits that
// long instead of its backoff.
type retryAfterError struct {
	err  error
	wait time.Duration // at most maxRetryAfter
}

func (e *retryAfterError) Error() string             { return e.err.Error() }
func (e *retryAfterError) Unwrap() error             { return e.err }
func (e *retryAfterError) RetryAfter() time.Duration { return e.wait }
