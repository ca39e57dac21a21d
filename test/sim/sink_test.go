package sim

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/handlerconfig"
	_ "github.com/wowd/wowd/internal/handlers" // registers the http sink
	"github.com/wowd/wowd/internal/receiver"
)

// In a third of the seeds the members' handler is wowd's HTTP sink, the
// real one (internal/handlers), posting over the in-memory network to a
// server in the bubble that plays the handler's part: the same seeded
// choices as simHandler, made per request instead of per try (503 for a
// transient failure, 422 for a permanent one, Wowd-Action: skip, a
// connection aborted without a response, a response later than the
// sink's request-timeout, one that waits for the request's cancellation).
// Half of those seeds batch (batch.max-messages), half speak h2c, half
// bound the sink's concurrency below the window. The sink dials through
// its member's network, so a cut or a crash closes its connections too.
//
// What the sink adds to the invariants: each try is acknowledged exactly
// once, and by the time Close returns, which it does by the stop's
// deadline (the daemon closes handlers with the stop's context: past it,
// Close cancels what is in flight); done, skipped or dead-lettered only as
// the server answered a request of that try the sink still waited for; per
// aggregate, no request for a record reaches the server before every
// earlier record of the aggregate was settled (a stronger
// form of the order check, at the sink's far end); a batch never holds two
// messages of one aggregate; a request the server holds past the sink's
// request-timeout sees its context end.

// sinkMode is how a run's members use the HTTP sink.
type sinkMode struct {
	batch       int  // batch.max-messages; 0: one message per request
	h2c         bool // HTTP/2 without TLS instead of HTTP/1.1
	concurrency int  // max-concurrency; 0: the window's
	// rate is the sink's rate-limit (requests per second; 0: none), with
	// bursts of burst: low enough that a window's tries can outlast the
	// handler timeout waiting for their turn and give it back.
	rate  int
	burst int
}

const (
	sinkAddr = "127.0.0.1:8080"
	// sinkRequestTimeout is the sink's request-timeout: with the batch's
	// linger, less than handlerTimeout, as the sink requires.
	sinkRequestTimeout = time.Second
)

// sinkFor returns the seed's use of the HTTP sink, nil when its members
// handle messages with simHandler. Not from the run's rng: the other
// choices of a seed stay as they were.
func sinkFor(seed uint64) *sinkMode {
	if mix(seed, 97)%3 != 0 {
		return nil
	}
	s := &sinkMode{h2c: mix(seed, 96)%2 == 0}
	if mix(seed, 95)%2 == 0 {
		s.batch = 2 + int(mix(seed, 94)%7)
	}
	if mix(seed, 93)%2 == 0 {
		s.concurrency = 1 + int(mix(seed, 92)%4)
	}
	if mix(seed, 91)%2 == 0 {
		s.rate, s.burst = 30+int(mix(seed, 90)%51), 1+int(mix(seed, 89)%4)
	}
	return s
}

func (s *sinkMode) String() string {
	if s == nil {
		return "none"
	}
	return fmt.Sprintf("batch %d, h2c %v, max-concurrency %d, rate-limit %d (burst %d)", s.batch, s.h2c, s.concurrency, s.rate, s.burst)
}

// startSinkServer serves the sink's endpoint on the in-memory network
// until the returned function is called, which waits for the server to
// stop and every request's handler to return.
func startSinkServer(t *testing.T, w *world) (stop func()) {
	ln, err := w.vn.Listen("tcp", sinkAddr)
	if err != nil {
		t.Fatal(err)
	}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	var handlers sync.WaitGroup // requests being answered
	serve := func(rw http.ResponseWriter, r *http.Request) {
		handlers.Add(1)
		defer handlers.Done()
		w.serveSink(rw, r)
	}
	srv := &http.Server{Handler: http.HandlerFunc(serve), Protocols: &protocols, ErrorLog: log.New(io.Discard, "", 0)}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln) // ends with Close
	}()
	return func() {
		_ = srv.Close()
		<-served
		handlers.Wait() // the bubble ends only once every goroutine did
	}
}

// newSink builds member id's HTTP sink. Its retries are reported to the
// member's receiver, as the daemon does, once the receiver exists.
func newSink(t *testing.T, w *world, m *member, log *zap.Logger) (handler.Handler, *sinkObserver) {
	spec, ok := handler.Default().Lookup("http")
	if !ok {
		t.Fatal("no http handler registered")
	}
	w.mu.Lock()
	l := w.limit
	w.noteRateLocked(m.id, l)
	w.mu.Unlock()
	raw := w.sinkConfig(m.id, l)
	cfg, err := handlerconfig.Decode(spec, raw)
	if err != nil {
		t.Fatal(err)
	}
	obs := &sinkObserver{}
	h, err := spec.New(cfg, handler.Deps{
		Dispatcher: "projection", Service: "sim", Timeout: handlerTimeout, Observer: obs,
		Logger: log.Named("sink").With(zap.Int("member", m.id)),
		Dial:   m.net.dial,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &sinkHandler{w: w, member: m.id, sink: h, obs: obs, spec: spec}, obs
}

// sinkConfig is member id's sink configuration, with the rate limit l.
func (w *world) sinkConfig(id int, l sinkLimit) map[string]any {
	raw := map[string]any{
		"url":             "http://" + sinkAddr + "/sink",
		"request-timeout": sinkRequestTimeout.String(),
		"max-attempts":    3,
		"backoff-initial": "100ms",
		"backoff-max":     "400ms",
		"max-concurrency": w.sink.concurrency,
		"h2c":             w.sink.h2c,
		"headers":         map[string]any{simMemberHeader: strconv.Itoa(id)},
	}
	if l.rate > 0 {
		raw["rate-limit"], raw["rate-burst"] = l.rate, l.burst
	}
	if w.sink.batch > 0 {
		raw["batch"] = map[string]any{"max-messages": w.sink.batch, "linger": "20ms"}
	}
	return raw
}

// sinkObserver hands the sink's retries to the member's receiver, which
// restarts the try's deadline after each wait.
type sinkObserver struct {
	r atomic.Pointer[receiver.Receiver]
	// orig maps the copy of a message handed to the sink (with the try's
	// header) to the receiver's message: the receiver finds a try by the
	// message's pointer (handler.Observer), and a report about the copy
	// would restart no deadline.
	orig sync.Map
}

func (o *sinkObserver) Retrying(m *handler.Message, attempt int, err error, wait time.Duration) {
	if r := o.r.Load(); r != nil {
		if om, ok := o.orig.Load(m); ok {
			m = om.(*handler.Message)
		}
		r.Retrying(m, attempt, err, wait)
	}
}

// Waiting and Started hand the sink's waits for its own limits (its
// max-concurrency below the window, its rate-limit) to the member's
// receiver, as the daemon's observer does: the try's deadline does not
// run while it waits (handler.WaitObserver). The context names the try.
func (o *sinkObserver) Waiting(ctx context.Context, m *handler.Message) {
	if r := o.r.Load(); r != nil {
		r.Waiting(ctx, o.original(m))
	}
}

func (o *sinkObserver) Started(ctx context.Context, m *handler.Message) {
	if r := o.r.Load(); r != nil {
		r.Started(ctx, o.original(m))
	}
}

// original returns the receiver's message of which m is the copy handed to
// the sink, or m.
func (o *sinkObserver) original(m *handler.Message) *handler.Message {
	if om, ok := o.orig.Load(m); ok {
		return om.(*handler.Message)
	}
	return m
}

var _ handler.WaitObserver = (*sinkObserver)(nil)

// sinkHandler is a member's handler in a sink run: each try is recorded
// as simHandler records it and handed to the sink, and the sink's
// acknowledgement is checked (once per try) and recorded on its way back.
type sinkHandler struct {
	w      *world
	member int
	sink   handler.Handler
	obs    *sinkObserver
	open   atomic.Int32 // tries given to the sink and not acknowledged yet
	spec   handler.Spec // the sink's, to decode a reloaded configuration
}

func (h *sinkHandler) Handle(ctx context.Context, m *handler.Message, ack handler.Ack) {
	w := h.w
	called := time.Now()
	at, key, seq, _, inc := w.delivered(ctx, h.member, m)
	w.mu.Lock()
	w.openTries++
	w.tries++
	try := w.tries
	w.mu.Unlock()
	h.open.Add(1)
	// The try's number travels as a record header, so that the server's
	// answers are told apart per try.
	tm := *m
	tm.Headers = append(slices.Clip(m.Headers), handler.Header{Key: tryHeader, Value: []byte(strconv.Itoa(try))})
	var acked atomic.Bool
	h.obs.orig.Store(&tm, m)
	h.sink.Handle(ctx, &tm, handler.AckFunc(func(err error) {
		if !acked.CompareAndSwap(false, true) {
			w.violate("member %d: the sink acknowledged a try of %v twice (then with %v)", h.member, at, err)
			return
		}
		w.mu.Lock()
		w.openTries--
		w.mu.Unlock()
		h.open.Add(-1)
		h.obs.orig.Delete(&tm)
		class, _ := handler.Classify(err)
		w.checkAnswer(h.member, at, try, err, class)
		switch {
		case err == nil:
			w.succeeded(at, key, seq, called, inc)
		case class == handler.Skip:
			w.skipped(at, key, seq, called, inc)
		default:
			w.tryFailed(at, called) // the receiver may dead-letter the record after it
		}
		ack.Done(err)
	}))
}

// close closes the sink as the daemon does, after the member's receiver
// stopped, with the stop's own deadline: past it (a stop that overran, or
// requests still in flight then), Close cancels the requests in flight and
// says so. Either way Close returns by the deadline, or at once when it is
// past (give or take a second for canceled requests to return), and every
// try the sink was given is acknowledged by the time it returns.
func (h *sinkHandler) close(deadline time.Time) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	by := deadline
	if now := time.Now(); now.After(by) {
		by = now // the stop overran: Close has no time left
	}
	err := h.sink.(handler.Closer).Close(ctx)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		h.w.violate("member %d: closing the sink: %v", h.member, err)
	}
	if err != nil {
		h.w.event("member %d: closing the sink: %v", h.member, err)
		h.w.mu.Lock()
		h.w.sinkCancels++
		h.w.mu.Unlock()
	}
	if late := time.Since(by); late > time.Second {
		h.w.violate("member %d: closing the sink returned %v after it had no time left", h.member, late)
	}
	if n := h.open.Load(); n != 0 {
		h.w.violate("member %d: %d tries given to the sink still unacknowledged when Close returned", h.member, n)
	}
}

// arrive records a request for the record at (key, seq) reaching the
// server and returns what the server does with it: the seeded choice for
// the how-many-th request of the record this is. Per aggregate, every
// earlier record must be settled by then.
func (w *world) arrive(at pos, key string, seq int) (behaviour, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.served[at]++
	if at.p >= 0 {
		for s := range seq {
			if !w.settledSeq[key][s] {
				w.violateLocked("aggregate %s: a request for #%d (partition %d offset %d) reached the sink before #%d was handled, skipped or dead-lettered",
					key, seq, at.p, at.o, s)
				break
			}
		}
	}
	return choose(w.seed, at, w.served[at])
}

// tryHeader carries a try's number to the server (as the sink passes
// record headers: Kafka-Header-Sim-Try, or the kafkaheadersimtry attribute
// of a batched event).
const tryHeader = "sim-try"

// What the server answered for a try, over all its requests (a bit each),
// written before the answer leaves and only while the request's client
// still waits for it.
const (
	answeredDone uint8 = 1 << iota
	answeredDeadLetter
	answeredSkip
)

// answered records the server's answer for a try, unless the request's
// client left already (it never reads that answer).
func (w *world) answered(r *http.Request, try int, a uint8) {
	if r.Context().Err() != nil {
		return
	}
	w.mu.Lock()
	w.answers[try] |= a
	w.mu.Unlock()
}

// checkAnswer checks the sink's acknowledgement of a try of at against
// what the server answered to that try's requests: done, a dead letter or
// a skip only where the server said so for that message (in a batch, for
// that message's id) in a request the sink still waited for.
func (w *world) checkAnswer(member int, at pos, try int, err error, class handler.Class) {
	var want uint8
	switch {
	case err == nil:
		want = answeredDone
	case class == handler.Skip:
		want = answeredSkip
	case class == handler.Permanent:
		want = answeredDeadLetter
	default:
		return // transient, canceled, closed: any request may end so
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.answers[try]&want == 0 {
		w.violateLocked("member %d: the sink acknowledged try %d of %v with %v, which the server never answered for it (answers %03b)", member, try, at, err, w.answers[try])
	}
}

// sinkMessage is one message of a request: its position and its value.
type sinkMessage struct {
	id    string // the CloudEvent id, in a batch
	try   int    // the try's number (tryHeader)
	at    pos
	key   string
	seq   int
	b     behaviour
	d     time.Duration
	valid bool
}

// serveSink answers the sink's requests, single or batched.
func (w *world) serveSink(rw http.ResponseWriter, r *http.Request) {
	w.sinkArrival(r.Header.Get(simMemberHeader))
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the client gave up
	}
	var msgs []sinkMessage
	batched := r.Header.Get("Content-Type") == "application/cloudevents-batch+json"
	if batched {
		msgs = w.batchMessages(body)
	} else {
		msgs = []sinkMessage{w.sinkMessage(r.Header.Get("kafka-partition"), r.Header.Get("kafka-offset"), r.Header.Get("kafka-key"), r.Header.Get("Kafka-Header-Sim-Try"), body)}
	}
	keys := map[string]bool{}
	for i := range msgs {
		m := &msgs[i]
		if !m.valid {
			http.Error(rw, "unreadable", http.StatusBadRequest)
			return
		}
		if keys[m.key] {
			w.violate("a batch holds two messages of aggregate %s", m.key)
		}
		keys[m.key] = true
		m.b, m.d = w.arrive(m.at, m.key, m.seq)
	}
	for _, m := range msgs {
		if m.b == panicOnce {
			panic(http.ErrAbortHandler) // the connection ends without a response
		}
	}
	arrived := time.Now()
	var wait, until time.Duration // the longest sleep; the longest wait for the cancellation
	for _, m := range msgs {
		switch m.b {
		case ackAsync, slow, hangOnce:
			wait = max(wait, m.d)
		case untilCancel:
			until = max(until, m.d)
		}
	}
	time.Sleep(wait)
	if until > wait {
		t := time.NewTimer(until - wait)
		select {
		case <-r.Context().Done():
		case <-t.C:
			// The sink cancels a request at its request-timeout; the server
			// sees that as the connection or stream ending.
			if late := time.Since(arrived); late > sinkRequestTimeout+200*time.Millisecond && r.Context().Err() == nil {
				w.violate("a request for %v ran %v, past the sink's request-timeout (%v), and its context did not end", msgs[0].at, late, sinkRequestTimeout)
			}
		}
		t.Stop()
	}
	if !batched {
		switch try := msgs[0].try; msgs[0].b {
		case failOnce:
			http.Error(rw, "sim: 503", http.StatusServiceUnavailable)
		case failPermanent:
			w.answered(r, try, answeredDeadLetter)
			http.Error(rw, "sim: 422", http.StatusUnprocessableEntity)
		case skipIt:
			w.answered(r, try, answeredSkip)
			rw.Header().Set("Wowd-Action", "skip")
		default:
			w.answered(r, try, answeredDone)
		}
		return
	}
	type result struct {
		ID     string `json:"id"`
		Action string `json:"action"`
	}
	results := []result{} // an empty array, not null: every message is done
	for _, m := range msgs {
		switch m.b {
		case failOnce:
			results = append(results, result{m.id, "retry"})
		case failPermanent:
			w.answered(r, m.try, answeredDeadLetter)
			results = append(results, result{m.id, "dead-letter"})
		case skipIt:
			w.answered(r, m.try, answeredSkip)
			results = append(results, result{m.id, "skip"})
		default:
			w.answered(r, m.try, answeredDone) // no entry: done
		}
	}
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(map[string]any{"results": results})
}

// sinkMessage reads one message's position and value; valid is false
// when they do not parse or do not agree.
func (w *world) sinkMessage(partition, offset, key, try string, value []byte) sinkMessage {
	p, perr := strconv.ParseInt(partition, 10, 32)
	o, oerr := strconv.ParseInt(offset, 10, 64)
	n, nerr := strconv.Atoi(try)
	k, seq, ok := parseValue(value)
	if partition == "" && offset == "" && ok {
		// A local record (taken in as the ingest does): the sink sends
		// no position for it, having none; the world knows where it is.
		w.mu.Lock()
		at, found := w.localAt[keySeq{k, seq}]
		w.mu.Unlock()
		p, o, perr, oerr = int64(at.p), at.o, nil, nil
		if !found {
			perr = errors.New("no position, and not a local record")
		}
	}
	m := sinkMessage{try: n, at: pos{int32(p), o}, key: k, seq: seq, valid: perr == nil && oerr == nil && nerr == nil && ok && k == key}
	if !m.valid {
		w.violate("the sink sent a message the server cannot read: partition %q offset %q key %q try %q value %.40q", partition, offset, key, try, value)
		if perr == nil && oerr == nil && p >= 0 {
			w.mu.Lock()
			w.poisonAtSinkLocked(m.at) // judged once every position is known (checkPoisonLocked)
			w.mu.Unlock()
		}
	}
	return m
}

// batchMessages reads a CloudEvents batch.
func (w *world) batchMessages(body []byte) []sinkMessage {
	var events []map[string]any
	if err := json.Unmarshal(body, &events); err != nil || len(events) == 0 {
		w.violate("the sink sent a batch the server cannot read (%v): %.80q", err, body)
		return []sinkMessage{{}}
	}
	str := func(e map[string]any, k string) string { s, _ := e[k].(string); return s }
	var msgs []sinkMessage
	for _, e := range events {
		value, err := base64.StdEncoding.DecodeString(str(e, "data_base64"))
		if err != nil {
			w.violate("a batched event's data_base64: %v", err)
		}
		if data, found := e["data"]; found {
			// A JSON value (an ingested Wow message) goes as it is, as data.
			value, err = json.Marshal(data)
			if err != nil {
				w.violate("a batched event's data: %v", err)
			}
		}
		m := w.sinkMessage(str(e, "kafkapartition"), str(e, "kafkaoffset"), str(e, "kafkakey"), str(e, "kafkaheadersimtry"), value)
		m.id = str(e, "id")
		msgs = append(msgs, m)
	}
	return msgs
}

// checkSinkLocked checks, once every member stopped, that the sinks acknowledged
// every try they were given.
func (w *world) checkSinkLocked() {
	if w.sink != nil && w.openTries != 0 {
		w.violateLocked("%d tries given to the sink were never acknowledged, though every member stopped", w.openTries)
	}
}

// sinkServedLocked describes the requests the server got for at.
func (w *world) sinkServedLocked(at pos) string {
	if w.sink == nil {
		return ""
	}
	var got []string
	for n := 1; n <= w.served[at]; n++ {
		b, _ := choose(w.seed, at, n)
		got = append(got, behaviourNames[b])
	}
	return fmt.Sprintf("; requests at the sink [%s]", strings.Join(got, " "))
}
