package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/wowd/wowd/handler"
)

// Batched delivery (batch.max-messages set): one request carries several
// messages as a CloudEvents batch, and its response says what follows for
// each of them (HTTP.md, "Batched delivery").
//
// Each attempt of a message still goes through handler.WithRetry on its
// own: the sink encodes it as a CloudEvent when the attempt starts and
// adds it to the batch being filled (the batcher). The batch is cut when
// it holds batch.max-messages messages, when the next message would take
// its body over batch.max-bytes, when the next message is of an aggregate
// or has an id the batch already holds, or batch.linger after its first
// message joined. A cut batch becomes a carrier: a call that workers and
// the queue handle as they handle an attempt, one request each, so
// max-concurrency and rate-limit count requests. The worker that makes the
// request reports each member's outcome to its own Ack; a retried member
// comes back as a new attempt, after its backoff, and joins a later batch.
//
// A member is in one place at a time, told by its state under sink.mu:
// callQueued while its batch is filled or waits for a worker, callRunning
// while its request is in flight, callDone once its outcome is reported
// or being reported. Its context's cancellation reports it at once in
// either of the first two (abandon); a batch leaves out the members done
// before its request is built, ignores the outcome of the ones done while
// it is in flight, and cancels that request once all of them are.
//
// wowd's executor gives a handler at most one message per aggregate at a
// time (the next message of an aggregate waits for the Ack of the one
// before), so a batch never holds two messages of one aggregate and no two
// requests in flight do either: the order of an aggregate's messages holds.
// The batcher checks it anyway when a message joins, for a try that wowd
// gave up on (its handler.timeout passed) while its request is in flight:
// the message's next try cannot join a batch holding its previous one.

// HTTPBatchConfig configures batched delivery.
type HTTPBatchConfig struct {
	MaxMessages int           `config:"max-messages" desc:"Messages one request carries at most, as a CloudEvents batch (application/cloudevents-batch+json, one structured-mode event per message); 0 sends each message in a request of its own, in binary mode."`
	MaxBytes    int           `config:"max-bytes" desc:"Bytes of a batch's request body at most; a message that is larger on its own goes alone."`
	Linger      time.Duration `config:"linger" desc:"How long a batch that is not full waits for more messages before it is sent: the latency batching adds at low traffic. With request-timeout, less than the dispatcher's handler.timeout."`
}

// Limits of the batch keys.
const (
	maxBatchMessages = 10_000
	minBatchBytes    = 1 << 10
	maxBatchBytes    = 64 << 20
	// maxBatchResponse is the largest batch response body read, or
	// batchResponsePerMessage for each message a batch may carry when that
	// is more (batchResponseCap); a longer one is malformed.
	maxBatchResponse = 1 << 20
	// batchResponsePerMessage is room for one message's entry in a batch
	// response: its id, its action, a reason of a few hundred bytes (wowd
	// keeps 256 of it) and a retry-after, so that a full list of them is
	// read whatever max-messages.
	batchResponsePerMessage = 1 << 10
)

// responseCap is the largest batch response body read: 1 MiB, or room for
// an entry of each message a batch may carry when that is more.
func (b HTTPBatchConfig) responseCap() int {
	return max(maxBatchResponse, b.MaxMessages*batchResponsePerMessage)
}

// batchContentType is the media type of a batch request: a JSON array of
// structured-mode CloudEvents (CloudEvents JSON format, "Batch format").
const batchContentType = "application/cloudevents-batch+json"

// enabled reports whether batched delivery is on.
func (b HTTPBatchConfig) enabled() bool { return b.MaxMessages > 0 }

// check checks the batch keys, reporting every problem.
func (b HTTPBatchConfig) check() []error {
	var errs []error
	if b.MaxMessages < 0 || b.MaxMessages > maxBatchMessages {
		errs = append(errs, fmt.Errorf("batch.max-messages: must be between 1 and %d to batch (0, the default, sends one message per request)", maxBatchMessages))
	}
	// The other keys are checked with batching off too: a bad value is
	// refused where it is written, not when max-messages turns it on.
	if b.MaxBytes < minBatchBytes || b.MaxBytes > maxBatchBytes {
		errs = append(errs, fmt.Errorf("batch.max-bytes: must be between %d and %d", minBatchBytes, maxBatchBytes))
	}
	if b.Linger <= 0 {
		errs = append(errs, errors.New("batch.linger: must be positive"))
	}
	return errs
}

// fitTry reports whether a batch, its linger and its request, fits in a
// try of the dispatcher's handler.timeout: a message's try may wait linger
// for its batch, then a request.
func (b HTTPBatchConfig) fitTry(requestTimeout, tryTimeout time.Duration) error {
	if !b.enabled() || tryTimeout <= 0 || b.Linger <= 0 {
		return nil
	}
	if b.Linger+requestTimeout >= tryTimeout {
		return fmt.Errorf("batch.linger: %v plus request-timeout (%v) must be less than the dispatcher's handler.timeout (%v): a message may wait for its batch, then for its request", b.Linger, requestTimeout, tryTimeout)
	}
	return nil
}

// batch is the members one request carries, in the order they joined.
type batch struct {
	calls []*call
	// queued counts the members still queued (not done, not yet in the
	// request), and endWait ends the carrier's context: once the last of
	// them is given up while the carrier waits for the rate limiter, the
	// wait ends and its turn goes to the next request instead of to a
	// request with nothing in it. Both guarded by sink.mu.
	queued  int
	endWait context.CancelFunc
}

// aggregateKey names an aggregate as wowd's executor does: a message of
// each at a time.
type aggregateKey struct{ context, aggregate, id string }

func aggregateOf(m *handler.Message) aggregateKey {
	return aggregateKey{m.Context, m.Aggregate, m.AggregateID}
}

// batcher is the batch being filled. Its fields are guarded by sink.mu.
type batcher struct {
	calls []*call                   // members, in the order they joined; some may be done
	size  int                       // bytes of the body they make: events, commas, brackets
	aggs  map[aggregateKey]struct{} // the aggregates of calls
	ids   map[string]struct{}       // the CloudEvent ids of calls
	gen   uint64                    // batches cut so far; a linger timer of an earlier batch does nothing
	timer *time.Timer               // cuts the batch linger after its first member joined; nil when empty
}

// holds reports whether a member of the batch is of c's aggregate or has
// its id.
func (b *batcher) holds(c *call) bool {
	if _, ok := b.aggs[aggregateOf(c.m)]; ok {
		return true
	}
	_, ok := b.ids[c.id]
	return ok
}

// join adds c to the batch.
func (b *batcher) join(c *call) {
	if b.aggs == nil {
		b.aggs = make(map[aggregateKey]struct{})
		b.ids = make(map[string]struct{})
	}
	if len(b.calls) == 0 {
		b.size = 2 // []
	} else {
		b.size++ // ,
	}
	b.size += len(c.event)
	b.calls = append(b.calls, c)
	b.aggs[aggregateOf(c.m)] = struct{}{}
	b.ids[c.id] = struct{}{}
	c.state = callQueued
}

// cut ends the batch being filled and returns its carrier, nil when it is
// empty.
func (b *batcher) cut() *call {
	b.gen++
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	if len(b.calls) == 0 {
		return nil
	}
	ctx, endWait := context.WithCancel(context.Background())
	carrier := &call{ctx: ctx, batch: &batch{calls: b.calls, endWait: endWait}}
	for _, c := range b.calls {
		if c.state == callQueued {
			c.inBatch = carrier.batch
			carrier.batch.queued++
		}
	}
	if carrier.batch.queued == 0 {
		endWait() // every member given up already: nothing to wait for
	}
	b.calls = make([]*call, 0, len(b.calls))
	b.size = 0
	clear(b.aggs)
	clear(b.ids)
	return carrier
}

// drop empties the batch at Close: it returns the members not done, moved
// to callDone, for their caller to finish.
func (b *batcher) drop() []*call {
	carrier := b.cut()
	if carrier == nil {
		return nil
	}
	var out []*call
	for _, c := range carrier.batch.calls {
		if c.state != callDone {
			c.state = callDone
			out = append(out, c)
		}
	}
	return out
}

// startBatched adds attempt of m to the batch being filled and returns at
// once; the batch is sent when it is cut.
func (s *httpSink) startBatched(ctx context.Context, m *handler.Message, attempt int, ack handler.Ack) {
	ev, id, err := s.encodeEvent(ctx, m, attempt, s.live.Load())
	if err != nil {
		ack.Done(handler.Classed(handler.Permanent, s.wrap(err)))
		return
	}
	c := &call{ctx: ctx, m: m, ack: ack, attempt: attempt, event: ev, id: id, batched: true}
	// Canceling ctx acknowledges c at once, wherever it is.
	c.stop = context.AfterFunc(ctx, func() { s.abandon(c) })
	b := &s.batcher
	var placed [2]handoff
	s.mu.Lock()
	if s.closed {
		c.state = callDone
		s.mu.Unlock()
		s.finish(c, s.wrap(handler.ErrClosed))
		return
	}
	if err := ctx.Err(); err != nil { // canceled before abandon could see c
		c.state = callDone
		s.mu.Unlock()
		s.finish(c, s.wrap(err))
		return
	}
	if len(b.calls) > 0 && (b.holds(c) || b.size+1+len(c.event) > s.cfg.Batch.MaxBytes) {
		placed[0] = s.placeCut()
	}
	b.join(c)
	if len(b.calls) >= s.cfg.Batch.MaxMessages || b.size >= s.cfg.Batch.MaxBytes {
		placed[1] = s.placeCut()
	} else if len(b.calls) == 1 {
		gen := b.gen
		b.timer = time.AfterFunc(s.cfg.Batch.Linger, func() { s.lingered(gen) })
	}
	s.mu.Unlock()
	s.hand(placed[0])
	s.hand(placed[1])
}

// placeCut cuts the batch being filled and places its carrier. Called with
// mu held; the caller hands what it returns over once it released mu.
func (s *httpSink) placeCut() handoff {
	carrier := s.batcher.cut()
	if carrier == nil {
		return handoff{}
	}
	h := s.place(carrier)
	if h.w == nil && s.waits != nil {
		// Queued behind max-concurrency: its members wait for the sink's
		// limit. Reported under mu, as every report of a member is: a
		// member's cancellation acknowledges it at once (abandon, under
		// mu), and no report may follow its acknowledgement; and no
		// worker can take the carrier before.
		for _, m := range carrier.batch.calls {
			if m.state == callQueued {
				m.waited = true
				s.waits.Waiting(m.ctx, m.m)
			}
		}
	}
	return h
}

// lingered runs linger after the first member of batch gen joined: the
// batch is sent as it is, unless it was cut meanwhile.
func (s *httpSink) lingered(gen uint64) {
	s.mu.Lock()
	if s.closed || s.batcher.gen != gen {
		s.mu.Unlock()
		return
	}
	s.batcher.timer = nil
	h := s.placeCut()
	s.mu.Unlock()
	s.hand(h)
}

// attemptBatch makes the request of the running carrier c with live, the
// settings its attempt read as it started, and reports the outcome of each
// of its members. (The members' events were encoded when they joined, each
// with the settings of that moment, leaving out the configured headers of
// those.)
func (s *httpSink) attemptBatch(w *worker, c *call, live *httpLive) {
	defer func() {
		s.mu.Lock()
		c.state = callDone
		s.mu.Unlock()
		c.batch.endWait()
	}()
	if err := s.waitTurn(c); err != nil {
		s.settleAll(c.batch.calls, s.wrap(err))
		return
	}
	// The request is no single message's: it ends with request-timeout,
	// when Close stops waiting for it, or when every member was given up
	// while it was in flight (abandon), not with one member's context.
	timeout := live.requestTimeout
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	s.mu.Lock()
	sent := make([]*call, 0, len(c.batch.calls))
	size := 1
	for _, m := range c.batch.calls {
		if m.state == callQueued {
			m.state, m.carrier = callRunning, c
			sent = append(sent, m)
			size += len(m.event) + 1
			if m.waited {
				m.waited = false
				s.waits.Started(m.ctx, m.m) // its request starts now; under mu, before any acknowledgement
			}
		}
	}
	c.running, c.cancelReq = len(sent), cancel
	s.mu.Unlock()
	if len(sent) == 0 {
		return // every member was canceled while it waited
	}
	body := make([]byte, 0, size)
	body = append(body, '[')
	for i, m := range sent {
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, m.event...)
	}
	body = append(body, ']')
	outcomes := s.postBatch(ctx, cancel, w, live, sent, body)
	// A request Close canceled failed for that: its members were not
	// handled, and are delivered again after a restart. (A member the
	// response says is done is done.)
	aborted := s.aborted.Load()
	for i, m := range sent {
		err := outcomes[i]
		if err != nil && aborted {
			err = s.wrap(handler.ErrClosed)
		}
		s.settle(m, err)
	}
}

// settle reports err as the outcome of the member c, unless it is done.
func (s *httpSink) settle(c *call, err error) {
	s.mu.Lock()
	if c.state == callDone {
		s.mu.Unlock()
		return
	}
	c.state = callDone
	s.mu.Unlock()
	s.finish(c, err)
}

// settleAll reports err as the outcome of each member of calls not done.
func (s *httpSink) settleAll(calls []*call, err error) {
	for _, c := range calls {
		s.settle(c, err)
	}
}

// postBatch POSTs body, the batch of the members sent, with ctx (canceled
// by cancel, and after live's request-timeout) and the configured headers
// of live, and returns the outcome of each, in their order: nil when the
// response says it is done, else an error classed as the response says
// (see HTTP.md, "Batched delivery").
func (s *httpSink) postBatch(ctx context.Context, cancel context.CancelFunc, w *worker, live *httpLive, sent []*call, body []byte) []error {
	w.mu.Lock()
	w.cancel = cancel
	aborted := s.aborted.Load()
	w.mu.Unlock()
	if aborted {
		cancel()
	}
	defer func() {
		w.mu.Lock()
		w.cancel = nil
		w.mu.Unlock()
	}()

	all := func(err error) []error { return same(len(sent), err) }
	req, err := s.newBatchRequest(ctx, body, live)
	if err != nil {
		return all(handler.Classed(handler.Permanent, s.wrap(err)))
	}
	resp, err := s.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // we name the URL ourselves, redacted
		}
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("timeout after %s: %w", live.requestTimeout, err)
		}
		return all(noResponseAction(err).failure(s.wrap(fmt.Errorf("batch of %d: %w", len(sent), err))))
	}
	defer drainClose(resp.Body)
	return s.batchOutcomes(resp, sent)
}

// batchOutcomes returns the outcome of each of the members sent that resp,
// the response to their batch, asks for, in their order.
func (s *httpSink) batchOutcomes(resp *http.Response, sent []*call) []error {
	all := func(err error) []error { return same(len(sent), err) }
	retryAfter, hasRetryAfter := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	act, override := s.action(resp)
	if override && act == actionDone {
		return all(nil) // the action header says every member is done, whatever the status
	}
	if override || act != actionDone {
		// An action header or a status that is not a success: it says what
		// follows for every member, as for a single message.
		err := act.failure(s.wrap(fmt.Errorf("batch of %d: %w", len(sent), responseError(resp, act, override))))
		if act == actionRetry && hasRetryAfter {
			err = &retryAfterError{err: err, wait: retryAfter}
		}
		return all(err)
	}
	results, err := readBatchResults(resp.Body, s.cfg.Batch.responseCap())
	if err != nil {
		// The members' fate is unknown: each is retried.
		err = s.wrap(fmt.Errorf("batch of %d: status %d: %w", len(sent), resp.StatusCode, err))
		if hasRetryAfter {
			return all(&retryAfterError{err: err, wait: retryAfter})
		}
		return all(err)
	}
	out := make([]error, len(sent)) // nil: done, unless a result says otherwise
	if len(results) == 0 {
		return out
	}
	index := make(map[string]int, len(sent))
	for i, m := range sent {
		index[m.id] = i
	}
	seen := make([]bool, len(sent))
	for _, r := range results {
		i, ok := index[r.ID]
		if !ok || seen[i] {
			s.log.Debug("ignoring a batch result of an id not in the batch, or repeated", zap.String("id", truncate(r.ID, 64)))
			continue
		}
		seen[i] = true
		out[i] = s.resultError(r, resp.StatusCode, retryAfter, hasRetryAfter)
	}
	return out
}

// same returns n outcomes, each err.
func same(n int, err error) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}

// newBatchRequest builds the request of a batch: body, the configured
// headers (headers-from-file as live, the attempt's settings, has them) and
// the batch media type. The members' attributes are in their events.
func (s *httpSink) newBatchRequest(ctx context.Context, body []byte, live *httpLive) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	u := *s.target.URL
	req.URL, req.Host = &u, s.target.Host
	files := live.files
	h := make(http.Header, len(s.static)+len(files)+1)
	for k, v := range s.static {
		h[k] = v
	}
	now := time.Now()
	for _, f := range files {
		h[f.name] = []string{f.get(now)}
	}
	h[hdrContentType] = []string{batchContentType}
	req.Header = h
	return req, nil
}

// batchResult is the outcome of one message in a batch response.
type batchResult struct {
	ID         string
	Action     string
	RetryAfter *float64
	Reason     string
}

// UnmarshalJSON reads an entry of a batch response strictly, as HTTP.md
// states its shape: an object whose id, action and reason, when there, are
// strings and whose retry-after is a number, by their exact names. A null
// in their place, or a null entry, is the wrong shape too: encoding/json
// would skip it (and match the names in any case), so that an endpoint
// writing nulls had its other entries applied and the null's message
// counted done. Other names are ignored.
func (r *batchResult) UnmarshalJSON(b []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil || fields == nil {
		return fmt.Errorf("an entry that is not an object: %.64s", b)
	}
	for name, v := range fields {
		var err error
		switch name {
		case "id":
			err = jsonString(v, &r.ID)
		case "action":
			err = jsonString(v, &r.Action)
		case "reason":
			err = jsonString(v, &r.Reason)
		case "retry-after":
			var f float64
			if len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
				err = errors.New("not a number")
			} else if err = json.Unmarshal(v, &f); err == nil {
				r.RetryAfter = &f
			}
		}
		if err != nil {
			return fmt.Errorf("an entry's %s: %w", name, err)
		}
	}
	return nil
}

// jsonString decodes v, a JSON value, into s if it is a string.
func jsonString(v json.RawMessage, s *string) error {
	if len(v) == 0 || v[0] != '"' {
		return errors.New("not a string")
	}
	return json.Unmarshal(v, s)
}

// errMalformedResults is wrapped by the failure of the members of a batch
// whose response body is not a result list.
var errMalformedResults = errors.New("malformed batch response")

// readBatchResults reads the body of a successful batch response, at most
// limit bytes: nothing (every message done) or {"results": [...]}, by that
// exact name.
func readBatchResults(body io.Reader, limit int) ([]batchResult, error) {
	raw, err := io.ReadAll(io.LimitReader(body, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("reading the batch response: %w", err)
	}
	if len(raw) > limit {
		return nil, fmt.Errorf("%w: body larger than %d bytes", errMalformedResults, limit)
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("%w: %v: %q", errMalformedResults, err, quoteBody(raw))
	}
	list, ok := doc["results"]
	if !ok || len(list) == 0 || list[0] != '[' {
		return nil, fmt.Errorf("%w: no \"results\" array: %q", errMalformedResults, quoteBody(raw))
	}
	var results []batchResult
	if err := json.Unmarshal(list, &results); err != nil {
		return nil, fmt.Errorf("%w: %v: %q", errMalformedResults, err, quoteBody(raw))
	}
	return results, nil
}

// quoteBody is the start of a response body, for an error.
func quoteBody(b []byte) string {
	if len(b) > maxErrorBody {
		b = b[:maxErrorBody]
	}
	return strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD"))
}

// resultError is the outcome r, a member's entry in a batch response with
// status code, asks for; header is the response's Retry-After, if it has
// one (hasHeader).
func (s *httpSink) resultError(r batchResult, code int, header time.Duration, hasHeader bool) error {
	act, ok := parseAction(r.Action)
	if !ok {
		return s.wrap(fmt.Errorf("status %d: %w: result of %s: unknown action %q", code, errMalformedResults, truncate(r.ID, 64), truncate(r.Action, 32)))
	}
	if act == actionDone {
		return nil
	}
	what := fmt.Sprintf("status %d: batch result %s", code, act)
	var err error
	if reason := strings.TrimSpace(strings.ToValidUTF8(r.Reason, "\uFFFD")); reason != "" {
		err = fmt.Errorf("%s: %q", what, truncate(reason, maxErrorBody))
	} else {
		err = errors.New(what)
	}
	err = act.failure(s.wrap(err))
	if act != actionRetry {
		return err
	}
	if r.RetryAfter != nil {
		return &retryAfterError{err: err, wait: resultRetryAfter(*r.RetryAfter)}
	}
	if hasHeader {
		return &retryAfterError{err: err, wait: header}
	}
	return err
}

// resultRetryAfter is the wait a result's retry-after, in seconds, asks
// for: at least 0, at most maxRetryAfter.
func resultRetryAfter(secs float64) time.Duration {
	if math.IsNaN(secs) || secs <= 0 {
		return 0
	}
	if secs >= maxRetryAfter.Seconds() {
		return maxRetryAfter
	}
	return time.Duration(secs * float64(time.Second))
}
