package handlers

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.uber.org/zap"
)

// httpLive holds the settings of a sink that a reload of the configuration
// file may change: the keys of HTTPConfig tagged reload:"true". The sink
// keeps them behind one atomic pointer (httpSink.live), replaced whole by
// setLive; an httpLive is never changed once stored.
//
// An attempt loads the pointer once, as it starts, and passes what it got
// down to everything it does (post, newRequest, encodeEvent, attemptBatch,
// newBatchRequest): it runs with one version of the settings, whatever
// reload lands meanwhile. The rate limit is the exception: the sink has one
// limiter, which a reload changes in place, and an attempt waiting for it
// then waits under the new rate (see limiter). Loading it again within an attempt is a
// bug: a reload between two loads would mix versions, and a batch event
// could then keep the value of a headers-from-file header renamed by the
// reload (the event leaves out the configured headers by name). Only the
// scheduler reads maxConcurrency apart from attempts, under sink.mu (place,
// popUnder), as setLive stores under it.
type httpLive struct {
	maxConcurrency int
	rate           float64 // applied to the sink's limiter (set) by setLive
	burst          int
	requestTimeout time.Duration
	files          []*fileHeader // headers-from-file
	tryTimeout     time.Duration // the dispatcher's handler.timeout, which request-timeout must fit (not reloaded)
}

// newLive returns the live settings of cfg, reading the header files it
// names (headers-from-file) but those of reuse (see fileHeaders). The static headers are not among them: a
// reload leaves them as the sink was built.
func newLive(cfg HTTPConfig, tryTimeout time.Duration, log *zap.Logger, reuse []*fileHeader) (*httpLive, error) {
	files, errs := fileHeaders(cfg, log, reuse)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	l := &httpLive{
		maxConcurrency: cfg.MaxConcurrency,
		rate:           cfg.RateLimit,
		burst:          cfg.RateBurst,
		requestTimeout: cfg.RequestTimeout,
		files:          files,
		tryTimeout:     tryTimeout,
	}
	return l, nil
}

// Reconfigure checks cfg, the sink's configuration read again (a
// *HTTPConfig differing from the running one only in keys tagged reload),
// reads its header files, and returns the function that makes it the
// sink's: attempts that start after it use the new max-concurrency,
// request-timeout and headers-from-file; those running finish with what
// they had. rate-limit and rate-burst change the sink's limiter in place:
// attempts waiting for it wait under the new rate. A batch's members keep the events they were encoded into when they
// joined it; its request takes the settings of its own attempt. A raised limit starts queued attempts
// at once; a lowered one is reached as running attempts end. An error
// leaves the sink as it is. The daemon calls it when the file changes.
func (s *httpSink) Reconfigure(cfg any) (apply func(), err error) {
	c, ok := cfg.(*HTTPConfig)
	if !ok {
		return nil, fmt.Errorf("http: config is %T, want *HTTPConfig", cfg)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	old := s.live.Load()
	if err := c.FitRunning(&s.cfg, old.tryTimeout); err != nil {
		return nil, err
	}
	// Only the header files: headers-from-env, read at start, needs a
	// restart, and a variable it names anew that is not set must not
	// refuse the reloadable keys (the daemon reports it for a restart).
	// A header file the sink reads already, under the same header name, is
	// kept as it is, not read again: the sink keeps its last good value
	// while the file cannot be used (a token mid-rotation), and that must
	// not refuse a reload of the other keys.
	l, err := newLive(*c, old.tryTimeout, s.log, old.files)
	if err != nil {
		return nil, err
	}
	l.files = append(l.files, movedToStatic(old.files, c)...)
	return func() { s.setLive(l) }, nil
}

// setLive makes l the sink's settings and, when its concurrency limit is
// higher than the number of running attempts, starts queued ones.
func (s *httpSink) setLive(l *httpLive) {
	var starts []handoff
	s.mu.Lock()
	s.live.Store(l) // under mu: start and next see the limit change between their critical sections
	// In place: a reload is no quiet period, and attempts waiting for the
	// limiter reserve again under the new rate (see limiter).
	s.limit.set(l.rate, l.burst, time.Now())
	for !s.closed && (l.maxConcurrency == 0 || s.busy < l.maxConcurrency) {
		c := s.pop()
		if c == nil {
			break
		}
		if c.state != callQueued {
			continue // abandoned while queued
		}
		starts = append(starts, s.assign(c))
	}
	s.mu.Unlock()
	for _, h := range starts {
		s.hand(h)
	}
}

// popUnder is pop for a worker that ended an attempt: nil while more
// attempts run than the concurrency limit allows (it was lowered), so the
// worker goes idle instead. Called with mu held.
func (s *httpSink) popUnder() *call {
	if limit := s.live.Load().maxConcurrency; limit > 0 && s.busy > limit {
		return nil
	}
	return s.pop()
}

// movedToStatic returns the header files of old that cfg takes out of
// headers-from-file and names among headers or headers-from-env instead:
// those are read at start and wait for a restart, so the removal alone
// would send every request without the header until then. Such a header
// keeps its file, as the rest of the move waits for the restart.
func movedToStatic(old []*fileHeader, cfg *HTTPConfig) []*fileHeader {
	var kept []*fileHeader
	for _, f := range old {
		if named(cfg.HeadersFromFile, f.name) {
			continue
		}
		if named(cfg.Headers, f.name) || named(cfg.HeadersFromEnv, f.name) {
			kept = append(kept, f)
		}
	}
	return kept
}

// named reports whether m has the header name (canonical) as a key.
func named(m map[string]string, name string) bool {
	for k := range m {
		if http.CanonicalHeaderKey(k) == name {
			return true
		}
	}
	return false
}
