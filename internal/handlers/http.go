package handlers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wowd/wowd/handler"
)

// HTTPConfig configures the http sink.
type HTTPConfig struct {
	URL            string            `config:"url" required:"true" desc:"Absolute http or https URL each message is POSTed to."`
	Timeout        time.Duration     `config:"timeout" desc:"Time limit of one request, reading the response included."`
	MaxAttempts    int               `config:"max-attempts" desc:"Attempts per message, the first included, before a transient failure is reported; 0 retries transient failures forever."`
	BackoffInitial time.Duration     `config:"backoff-initial" desc:"Wait before the first retry; it doubles with each retry, with jitter."`
	BackoffMax     time.Duration     `config:"backoff-max" desc:"Longest wait between retries (a Retry-After response header may ask for up to 5m)."`
	MaxConcurrency int               `config:"max-concurrency" desc:"Requests this sink has in flight at once."`
	Headers        map[string]string `config:"headers" secret:"true" desc:"Static headers added to every request."`
	ContentType    string            `config:"content-type" desc:"Content-Type of a request whose record has no content-type header."`
}

func defaultHTTPConfig() *HTTPConfig {
	return &HTTPConfig{
		Timeout:        10 * time.Second,
		MaxAttempts:    5,
		BackoffInitial: 200 * time.Millisecond,
		BackoffMax:     30 * time.Second,
		MaxConcurrency: 64,
		ContentType:    "application/json",
	}
}

// Validate checks the configuration, reporting every problem.
func (c *HTTPConfig) Validate() error {
	var errs []error
	if err := checkURL(c.URL); err != nil {
		errs = append(errs, fmt.Errorf("url: %w", err))
	}
	if c.Timeout <= 0 {
		errs = append(errs, errors.New("timeout: must be positive"))
	}
	if c.MaxAttempts < 0 {
		errs = append(errs, errors.New("max-attempts: must not be negative (0 retries forever)"))
	}
	if c.BackoffInitial <= 0 {
		errs = append(errs, errors.New("backoff-initial: must be positive"))
	}
	if c.BackoffMax < c.BackoffInitial {
		errs = append(errs, errors.New("backoff-max: must not be less than backoff-initial"))
	}
	if c.MaxConcurrency < 1 {
		errs = append(errs, errors.New("max-concurrency: must be at least 1"))
	}
	for _, k := range slices.Sorted(maps.Keys(c.Headers)) {
		if err := checkStaticHeader(k, c.Headers[k]); err != nil {
			errs = append(errs, fmt.Errorf("headers.%s: %w", k, err))
		}
	}
	if c.ContentType == "" || !validHeaderValue(c.ContentType) {
		errs = append(errs, errors.New("content-type: must be a non-empty header value"))
	}
	return errors.Join(errs...)
}

func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the URL, credentials included
		}
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("scheme %q: want http or https", u.Scheme)
	}
	if u.Host == "" {
		return errors.New("no host")
	}
	return nil
}

func checkStaticHeader(k, v string) error {
	lk := strings.ToLower(k)
	switch {
	case !validHeaderName(k):
		return errors.New("not a valid header name")
	case !validHeaderValue(v):
		return errors.New("value holds control characters")
	case lk == "content-type":
		return errors.New("set content-type instead")
	case lk == "host" || lk == "content-length" || lk == "transfer-encoding":
		return errors.New("set by the HTTP client")
	case strings.HasPrefix(lk, "ce-") || strings.HasPrefix(lk, "kafka-") || strings.HasPrefix(lk, "wowd-"):
		return errors.New("the ce-, kafka- and wowd- prefixes are reserved")
	}
	return nil
}

func httpSpec() handler.Spec {
	return handler.Spec{
		Name:    "http",
		Summary: "POSTs each message to a URL as a CloudEvent in binary mode, retrying transient failures.",
		Config:  func() any { return defaultHTTPConfig() },
		New: func(cfg any, deps handler.Deps) (handler.Handler, error) {
			c, ok := cfg.(*HTTPConfig)
			if !ok {
				return nil, fmt.Errorf("http: config is %T, want *HTTPConfig", cfg)
			}
			if err := c.Validate(); err != nil {
				return nil, err
			}
			return newHTTPSink(*c, deps), nil
		},
	}
}

// maxRetryAfter caps the wait a Retry-After response header can ask for.
const maxRetryAfter = 5 * time.Minute

// errSinkClosed is the outcome of messages the sink gave up on because it
// was closed. It wraps context.Canceled so wowd does not commit them.
var errSinkClosed = fmt.Errorf("http sink closed: %w", context.Canceled)

// httpSink POSTs messages to one URL.
//
// Handle only queues a call. A fixed pool of cfg.MaxConcurrency worker
// goroutines, started by newHTTPSink and stopped by Close, takes calls from
// the queue in order and makes one attempt each. A call that has to retry
// waits on a timer (no goroutine) and then goes to the back of the queue. A
// call is in exactly one place at a time, told by its state, which only
// changes under mu; whoever moves it to callDone reports its outcome, so the
// ack is called exactly once.
//
// The queue is unbounded: wowd's window (wow.dispatch.max-in-flight) bounds
// the messages a sink holds.
type httpSink struct {
	cfg      HTTPConfig
	url      string // cfg.URL
	redacted string // url without its password, for errors
	static   http.Header
	client   *http.Client
	obs      handler.Observer

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

func newHTTPSink(cfg HTTPConfig, deps handler.Deps) *httpSink {
	u, _ := url.Parse(cfg.URL) // checked by Validate
	static := make(http.Header, len(cfg.Headers))
	for k, v := range cfg.Headers {
		static.Set(k, v)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ForceAttemptHTTP2 = true
	tr.MaxIdleConns = max(tr.MaxIdleConns, cfg.MaxConcurrency)
	tr.MaxIdleConnsPerHost = cfg.MaxConcurrency
	s := &httpSink{
		cfg:      cfg,
		url:      cfg.URL,
		redacted: u.Redacted(),
		static:   static,
		client: &http.Client{
			Transport:     tr,
			CheckRedirect: checkRedirect,
		},
		obs:     deps.Observer,
		waiting: make(map[*call]struct{}),
	}
	s.work.L = &s.mu
	s.closing, s.abort = context.WithCancel(context.Background())
	s.workers.Add(cfg.MaxConcurrency)
	for range cfg.MaxConcurrency {
		go s.worker()
	}
	return s
}

// checkRedirect follows only redirects that keep the method and the body
// (307, 308): after a 301, 302 or 303 the client would send a GET without the
// message. The 3xx response is then the outcome, a permanent failure.
func checkRedirect(req *http.Request, via []*http.Request) error {
	if req.Response == nil || len(via) >= 10 {
		return http.ErrUseLastResponse
	}
	switch req.Response.StatusCode {
	case http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return nil
	}
	return http.ErrUseLastResponse
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

// Close stops the sink. Queued calls and calls waiting to retry are
// acknowledged at once with an error wrapping context.Canceled; requests in
// flight may finish until ctx is done, then they are canceled and
// acknowledged the same way. Close returns when every worker has stopped.
func (s *httpSink) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
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
