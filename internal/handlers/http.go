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
)

// maxRetryAfter caps the wait a Retry-After response header can ask for.
const maxRetryAfter = 5 * time.Minute

// errSinkClosed is the outcome of messages the sink gave up on because it
// was closed. It wraps context.Canceled so wowd does not commit them.
var errSinkClosed = fmt.Errorf("http sink closed: %w", context.Canceled)

// httpSink POSTs messages to one URL.
//
// Handle only queues a call. A fixed pool of cfg.MaxConcurrency worker
// goroutines, started by newHTTPSink and stopped by Close, takes calls from
// the queue in order and makes one attempt each, after waiting for the rate
// limiter if there is one. A call that has to retry waits on a timer (no
// goroutine) and then goes to the back of the queue. A call is in exactly
// one place at a time, told by its state, which only changes under mu;
// whoever moves it to callDone reports its outcome, so the ack is called
// exactly once.
//
// The queue is unbounded: wowd's window (wow.dispatch.max-in-flight) bounds
// the messages a sink holds.
type httpSink struct {
	cfg      HTTPConfig
	url      string        // cfg.URL
	redacted string        // url without its password, for errors
	static   http.Header   // headers and headers-from-env, resolved
	files    []*fileHeader // headers-from-file
	client   *http.Client
	limit    *limiter // nil without rate-limit
	obs      handler.Observer
	log      *zap.Logger

	// stopping is closed by Close: workers waiting for the rate limiter
	// give up their call.
	stopping chan struct{}

	// closing is canceled when Close stops waiting for requests in flight;
	// it cancels them.
	closing context.Context
	abort   context.CancelFunc

	workers sync.WaitGroup

	mu      sync.Mutex         // guards queue, waiting, closed and the state and timer of every call
	work    sync.Cond          // signaled, with mu, when a call is queued or the sink closes
	queue   callQueue          // calls to attempt, in order; may hold abandoned calls, skipped
	waiting map[*call]struct{} // calls whose retry timer runs
	closed  bool               // set by Close; nothing is queued after it
}

var (
	_ handler.Handler = (*httpSink)(nil)
	_ handler.Closer  = (*httpSink)(nil)
)

// callState tells where a call is.
type callState uint8

const (
	callNew     callState = iota // being queued by Handle
	callQueued                   // in sink.queue
	callRunning                  // a worker is making an attempt
	callWaiting                  // in sink.waiting, its timer running
	callDone                     // outcome reported or being reported
)

// call is one message on its way through the sink.
type call struct {
	ctx     context.Context // from Handle; canceling it abandons the call
	m       *handler.Message
	ack     handler.Ack
	stop    func() bool // unregisters the ctx cancellation hook
	attempt int         // attempts started; only the running worker touches it

	state callState   // guarded by sink.mu
	timer *time.Timer // guarded by sink.mu; set while callWaiting
}

// newHTTPSink builds a sink from a validated configuration. It reads the
// environment variables and files the configuration names; their errors
// name the header and the source, never a value.
func newHTTPSink(cfg HTTPConfig, deps handler.Deps) (*httpSink, error) {
	u, _ := url.Parse(cfg.URL) // checked by Validate
	if deps.Timeout > 0 && cfg.RequestTimeout >= deps.Timeout {
		return nil, fmt.Errorf("request-timeout %v: must be less than the dispatcher's handler.timeout (%v), or every slow request fails the message's try",
			cfg.RequestTimeout, deps.Timeout)
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
	s := &httpSink{
		cfg:      cfg,
		url:      cfg.URL,
		redacted: u.Redacted(),
		static:   static,
		files:    files,
		client: &http.Client{
			Transport:     tr,
			CheckRedirect: checkRedirect,
		},
		obs:      deps.Observer,
		log:      log,
		stopping: make(chan struct{}),
		waiting:  make(map[*call]struct{}),
	}
	if cfg.RateLimit > 0 {
		s.limit = newLimiter(cfg.RateLimit, cfg.RateBurst)
	}
	s.work.L = &s.mu
	s.closing, s.abort = context.WithCancel(context.Background())
	s.workers.Add(cfg.MaxConcurrency)
	for range cfg.MaxConcurrency {
		go s.worker()
	}
	return s, nil
}

// Handle queues m and returns at once; a worker POSTs it.
func (s *httpSink) Handle(ctx context.Context, m *handler.Message, ack handler.Ack) {
	if err := ctx.Err(); err != nil {
		ack.Done(s.wrap(err))
		return
	}
	c := &call{ctx: ctx, m: m, ack: ack}
	c.stop = context.AfterFunc(ctx, func() { s.abandon(c) })
	s.mu.Lock()
	if s.closed {
		c.state = callDone
		s.mu.Unlock()
		s.finish(c, s.wrap(errSinkClosed))
		return
	}
	c.state = callQueued
	s.queue.push(c)
	s.mu.Unlock()
	s.work.Signal()
}

// Close stops the sink. Queued calls, calls waiting to retry and calls
// waiting for the rate limiter are acknowledged at once with an error
// wrapping context.Canceled; requests in flight may finish until ctx is
// done, then they are canceled and acknowledged the same way. Close returns
// when every worker has stopped.
func (s *httpSink) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.stopping)
	var dropped []*call
	for c := s.queue.pop(); c != nil; c = s.queue.pop() {
		if c.state == callQueued {
			c.state = callDone
			dropped = append(dropped, c)
		}
	}
	for c := range s.waiting {
		c.timer.Stop()
		c.state = callDone
		dropped = append(dropped, c)
	}
	clear(s.waiting)
	s.mu.Unlock()
	s.work.Broadcast()

	for _, c := range dropped {
		s.finish(c, s.wrap(errSinkClosed))
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

// next takes the next queued call, waiting for one; nil means stop.
func (s *httpSink) next() *call {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		for c := s.queue.pop(); c != nil; c = s.queue.pop() {
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

// attempt makes one attempt of the running call c and decides what follows.
func (s *httpSink) attempt(c *call) {
	if err := s.waitTurn(c); err != nil {
		s.complete(c, s.wrap(err))
		return
	}
	c.attempt++
	retryAfter, hasRetryAfter, err := s.post(c)
	switch {
	case err == nil:
		s.complete(c, nil)
	case c.ctx.Err() != nil:
		s.complete(c, s.wrap(c.ctx.Err()))
	case s.closing.Err() != nil:
		s.complete(c, s.wrap(errSinkClosed))
	default:
		if class, _ := handler.Classify(err); class != handler.Transient {
			s.complete(c, handler.WithAttempts(c.attempt, err))
			return
		}
		if s.cfg.MaxAttempts > 0 && c.attempt >= s.cfg.MaxAttempts {
			s.complete(c, handler.WithAttempts(c.attempt, handler.Classed(handler.Transient,
				fmt.Errorf("giving up after %d attempts: %w", c.attempt, err))))
			return
		}
		wait := s.backoff(c.attempt)
		if hasRetryAfter {
			wait = retryAfter
		}
		s.retryLater(c, err, wait)
	}
}

// waitTurn waits until the rate limiter lets the running call c make a
// request. It returns early with the error of c's context, or errSinkClosed
// when the sink is closing.
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
		return errSinkClosed
	}
}

// retryLater puts the call that failed with err on a timer that queues it
// again after wait.
func (s *httpSink) retryLater(c *call, err error, wait time.Duration) {
	if s.obs != nil {
		s.obs.Retrying(c.m, c.attempt, err, wait)
	}
	s.mu.Lock()
	if s.closed || c.ctx.Err() != nil {
		c.state = callDone
		s.mu.Unlock()
		if ctxErr := c.ctx.Err(); ctxErr != nil {
			s.finish(c, s.wrap(ctxErr))
		} else {
			s.finish(c, s.wrap(errSinkClosed))
		}
		return
	}
	c.state = callWaiting
	s.waiting[c] = struct{}{}
	c.timer = time.AfterFunc(wait, func() { s.requeue(c) })
	s.mu.Unlock()
}

// requeue puts a call whose backoff is over at the back of the queue.
func (s *httpSink) requeue(c *call) {
	s.mu.Lock()
	if c.state != callWaiting { // abandoned or closed meanwhile
		s.mu.Unlock()
		return
	}
	delete(s.waiting, c)
	c.timer = nil
	c.state = callQueued
	s.queue.push(c)
	s.mu.Unlock()
	s.work.Signal()
}

// abandon runs when the context of c is canceled. A queued or waiting call is
// acknowledged at once; a running one is acknowledged by its worker when the
// canceled request returns.
func (s *httpSink) abandon(c *call) {
	s.mu.Lock()
	switch c.state {
	case callQueued: // stays in the queue; next skips it
	case callWaiting:
		c.timer.Stop()
		delete(s.waiting, c)
	default:
		s.mu.Unlock()
		return
	}
	c.state = callDone
	s.mu.Unlock()
	c.ack.Done(s.wrap(c.ctx.Err()))
}

// complete reports the outcome of the running call c.
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
