package handlertest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/wowd/wowd/handler"
)

// Target is the system downstream of the handler under test, scripted by the
// suite: for each message it decides whether the handler's call succeeds,
// fails transiently, fails permanently, asks for the message to be skipped,
// or is slow. A handler reaches it in one of two ways.
//
// An HTTP sink POSTs to URL, a server on 127.0.0.1 that finds the message
// by its kafka-offset request header (the wowd HTTP sink contract) and
// answers 204 (success), 503 (transient), 400 (permanent), 200 with
// `Wowd-Action: skip` (skip), or holds the request (slow). A batch
// (Content-Type application/cloudevents-batch+json: a JSON array of
// CloudEvents, each with its kafkaoffset attribute) gets, once every
// message's call ended, 200 with a result per message that did not
// succeed: {"results":[{"id":..., "action":"retry|dead-letter|skip"}]}.
//
// A Go plugin calls Call where it would do its I/O, with the message's
// context (or one derived from it) and the message, and treats the error
// as it would its own: nil is success; a plain error is transient;
// [handler.Permanent] and [handler.Skip] errors are classed with
// [handler.Classed]. A slow call returns ctx.Err() when ctx is done.
type Target struct {
	URL  string
	Call func(ctx context.Context, m *handler.Message) error
}

// ErrTransient is the error Target.Call returns for a transient failure.
var ErrTransient = errors.New("handlertest: transient failure")

// behavior is what the target does on one call.
type behavior uint8

const (
	succeed       behavior = iota
	failTransient          // fail, retrying may help
	failPermanent          // fail, retrying cannot help
	askSkip                // ask for the message to be skipped
	hang                   // wait until the call's context is done or the target is released; then fail transiently
	gate                   // wait until the target is released, whatever the context; then fail transiently
	pause                  // wait up to 2ms, then succeed
)

// result is the outcome of one call.
type result uint8

const (
	resultOK result = iota
	resultTransient
	resultPermanent
	resultSkip
	resultCanceled // the call's context ended it
)

// callRecord is one call of the target.
type callRecord struct {
	offset int64
	start  time.Time
}

// target is the scripted downstream system behind a Target.
type target struct {
	srv      *httptest.Server
	released chan struct{} // closed by release
	once     sync.Once     // closes released

	mu        sync.Mutex           // guards script, calls and succeeded
	script    map[int64][]behavior // by offset: call i does script[min(i, len-1)]; none means succeed
	calls     []callRecord         // every call, in the order they started
	succeeded map[int64]bool       // offsets whose call succeeded and returned
}

// newTarget starts a target; it is released and stopped at the end of the
// test.
func newTarget(t *testing.T) *target {
	tg := &target{
		released:  make(chan struct{}),
		script:    make(map[int64][]behavior),
		succeeded: make(map[int64]bool),
	}
	tg.srv = httptest.NewServer(http.HandlerFunc(tg.serveHTTP))
	t.Cleanup(func() {
		tg.release()
		tg.srv.Close()
	})
	return tg
}

// public returns the Target handed to the handler under test.
func (tg *target) public() Target { return Target{URL: tg.srv.URL, Call: tg.call} }

// set scripts the calls for offset.
func (tg *target) set(offset int64, b ...behavior) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	tg.script[offset] = b
}

// release ends every held call and makes later hang and gate calls return
// at once.
func (tg *target) release() { tg.once.Do(func() { close(tg.released) }) }

// run makes one call for offset and returns its result.
func (tg *target) run(ctx context.Context, offset int64) result {
	tg.mu.Lock()
	var n int
	for _, c := range tg.calls {
		if c.offset == offset {
			n++
		}
	}
	tg.calls = append(tg.calls, callRecord{offset: offset, start: time.Now()})
	b := succeed
	if s := tg.script[offset]; len(s) > 0 {
		b = s[min(n, len(s)-1)]
	}
	tg.mu.Unlock()

	switch b {
	case failTransient:
		return resultTransient
	case failPermanent:
		return resultPermanent
	case askSkip:
		return resultSkip
	case hang:
		select {
		case <-ctx.Done():
			return resultCanceled
		case <-tg.released:
			return resultTransient
		}
	case gate:
		<-tg.released
		return resultTransient
	case pause:
		select {
		case <-ctx.Done():
			return resultCanceled
		case <-time.After(rand.N(2 * time.Millisecond)):
		}
	}
	tg.mu.Lock()
	tg.succeeded[offset] = true
	tg.mu.Unlock()
	return resultOK
}

// call is Target.Call.
func (tg *target) call(ctx context.Context, m *handler.Message) error {
	switch tg.run(ctx, m.Offset) {
	case resultOK:
		return nil
	case resultPermanent:
		return handler.Classed(handler.Permanent, errors.New("handlertest: permanent failure"))
	case resultSkip:
		return handler.Classed(handler.Skip, errors.New("handlertest: skip"))
	case resultCanceled:
		return ctx.Err()
	}
	return ErrTransient
}

// serveHTTP is the target as an HTTP sink sees it.
func (tg *target) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "application/cloudevents-batch+json" {
		tg.serveBatch(w, r)
		return
	}
	offset, err := strconv.ParseInt(r.Header.Get("kafka-offset"), 10, 64)
	if err != nil {
		http.Error(w, "no kafka-offset header", http.StatusBadRequest)
		return
	}
	_, _ = io.Copy(io.Discard, r.Body) // so the server notices a client that gives up
	switch tg.run(r.Context(), offset) {
	case resultOK:
		w.WriteHeader(http.StatusNoContent)
	case resultPermanent:
		http.Error(w, "handlertest: permanent failure", http.StatusBadRequest)
	case resultSkip:
		w.Header().Set("Wowd-Action", "skip")
		w.WriteHeader(http.StatusOK)
	default:
		http.Error(w, "handlertest: transient failure", http.StatusServiceUnavailable)
	}
}

// serveBatch is the target as an HTTP sink sending batches sees it: each
// message of the batch is a call, the calls run at once, and the response
// says what follows for each message that did not succeed.
func (tg *target) serveBatch(w http.ResponseWriter, r *http.Request) {
	var events []struct {
		ID     string `json:"id"`
		Offset string `json:"kafkaoffset"`
	}
	if err := json.NewDecoder(r.Body).Decode(&events); err != nil {
		http.Error(w, "handlertest: not a CloudEvents batch: "+err.Error(), http.StatusBadRequest)
		return
	}
	offsets := make([]int64, len(events))
	for i, ev := range events {
		off, err := strconv.ParseInt(ev.Offset, 10, 64)
		if err != nil {
			http.Error(w, "handlertest: an event without a kafkaoffset attribute", http.StatusBadRequest)
			return
		}
		offsets[i] = off
	}
	results := make([]result, len(events))
	var wg sync.WaitGroup
	for i, off := range offsets {
		wg.Go(func() { results[i] = tg.run(r.Context(), off) })
	}
	wg.Wait()
	type entry struct {
		ID     string `json:"id"`
		Action string `json:"action"`
	}
	out := struct {
		Results []entry `json:"results"`
	}{Results: []entry{}}
	for i, res := range results {
		switch res {
		case resultOK:
		case resultPermanent:
			out.Results = append(out.Results, entry{events[i].ID, "dead-letter"})
		case resultSkip:
			out.Results = append(out.Results, entry{events[i].ID, "skip"})
		default:
			out.Results = append(out.Results, entry{events[i].ID, "retry"})
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// callsOf returns the start times of the calls for offset.
func (tg *target) callsOf(offset int64) []time.Time {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	var out []time.Time
	for _, c := range tg.calls {
		if c.offset == offset {
			out = append(out, c.start)
		}
	}
	return out
}

// order returns the offsets of every call, in the order they started.
func (tg *target) order() []int64 {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	out := make([]int64, len(tg.calls))
	for i, c := range tg.calls {
		out[i] = c.offset
	}
	return out
}

// hasSucceeded reports whether a call for offset succeeded and returned.
func (tg *target) hasSucceeded(offset int64) bool {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return tg.succeeded[offset]
}
