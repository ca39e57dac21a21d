// Package ingest holds the local-first ingest endpoint: a co-located
// producer hands wowd a Wow message over HTTP; wowd admits it into its own
// receivers' windows and mailboxes at once, and once they handled it,
// publishes it to the message's topic marked as handled here, so that when
// it comes back through a receiver of this service it is acknowledged
// without being handled twice.
//
// The other decisions about a record (is the receiver stopping, was it
// handled locally first, is it a valid Wow message of its topic, does the
// dispatcher want it) are made per record by the receivers.
package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/bearer"
	"github.com/wowd/wowd/internal/loopback"
	"github.com/wowd/wowd/internal/metrics"
	"github.com/wowd/wowd/internal/receiver"
	"github.com/wowd/wowd/internal/topicsize"
	"github.com/wowd/wowd/internal/wow"
)

// Path is the ingest endpoint; the message kind follows it:
// POST /v1/messages/{command|event|state}.
const Path = "/v1/messages/"

// MaxBody bounds an ingested message.
const MaxBody = 8 << 20

// Receiver is the part of a receiver the ingest needs.
type Receiver interface {
	Dispatcher() string
	Routes(topic string) bool
	Admit(ctx context.Context, rec *kgo.Record) (receiver.Admitted, error)
	// Refused says that a message of the aggregate the receiver did not
	// take (Admit refused it, or was not asked) is to be published: its
	// later ingested messages are given up there from now on, until the
	// copy is known handled. Published or NotPublished follows.
	Refused(topic, key string)
	// Published says where the copy of a refused message went: the
	// aggregate stays held until it is handled.
	Published(topic, key string, partition int32, offset int64)
	// NotPublished says that the copy of a refused message was not
	// published: nothing is to wait for.
	NotPublished(topic, key string)
}

// Producer publishes records; a franz-go client.
type Producer interface {
	ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults
}

// publishTimeout bounds the publish of an ingested message.
const publishTimeout = 30 * time.Second

// defaultBodyTimeout bounds the read of a request's body (at most MaxBody).
const defaultBodyTimeout = 30 * time.Second

// Ingest serves the ingest endpoint.
//
// A message is admitted to every receiver of this service that consumes its
// topic, and published once each of them finished handling it or gave it
// up, marked as handled here by the dispatchers of those that finished, so
// that their receivers skip its copy. The others (given up: the receiver
// stopped first; or not admitted) handle it from Kafka: handled twice at worst,
// never lost. Once a message is admitted, its publish no longer depends on
// the caller staying connected.
type Ingest struct {
	Service     string
	TopicPrefix string
	Contexts    map[string]wow.Context // by context name
	Receivers   []Receiver
	Producer    Producer
	Log         *zap.Logger
	// Token, when set, is the bearer token every request must carry
	// (wow.ingest.token-file); others are answered 401 before anything is
	// read or published.
	Token *bearer.File
	// Metrics counts the answers; nil counts nothing.
	Metrics *metrics.Ingest
	// Sizes, when set, says how large a message each topic takes (the
	// topic's max.message.bytes); without it, the Kafka client's default
	// batch limit. A larger message is refused (413) before it is handled.
	Sizes *Sizes
	// MaxInFlight bounds the requests under way (wow.ingest.max-in-flight);
	// more are answered 503 with Retry-After before their body is read.
	// 0 sets no bound.
	MaxInFlight int
	// Rate, when set, bounds the requests accepted per second on the
	// endpoint's listener (wow.ingest.rate-limit); more are answered 429
	// with Retry-After before their body is read.
	Rate *rate.Limiter
	// LoopbackOnly says that nothing authenticates a request (no token
	// file, no client certificates: allowed only on a loopback listener).
	// A request addressed to another host than a loopback one is then
	// refused (403), so that a web page cannot reach the endpoint through
	// a DNS name rebound to 127.0.0.1.
	LoopbackOnly bool

	cop         *http.CrossOriginProtection
	now         func() time.Time // time.Now; tests set another clock
	bodyTimeout time.Duration    // defaultBodyTimeout when 0; tests set a shorter one

	mu       sync.Mutex    // guards stopping, requests, idle, quit and cop
	stopping bool          // refusing new requests
	requests int           // requests under way
	idle     chan struct{} // closed when requests drops to zero while draining
	quit     chan struct{} // closed by Drain: stop waiting for local handling
}

// Stop makes the endpoint refuse new messages (503 with Retry-After).
// Requests under way carry on.
func (in *Ingest) Stop() {
	in.mu.Lock()
	in.stopping = true
	in.mu.Unlock()
}

// entry is what enter made of a request.
type entry uint8

const (
	entered  entry = iota // counted in: call leave
	stopping              // the endpoint is stopping
	busy                  // MaxInFlight requests are under way
)

// enter counts a request in, unless the endpoint is stopping or busy. It
// returns the channel that Drain closes.
func (in *Ingest) enter() (quit <-chan struct{}, e entry) {
	in.mu.Lock()
	defer in.mu.Unlock()
	switch {
	case in.stopping:
		return nil, stopping
	case in.MaxInFlight > 0 && in.requests >= in.MaxInFlight:
		return nil, busy
	}
	if in.quit == nil {
		in.quit = make(chan struct{})
	}
	in.requests++
	return in.quit, entered
}

// forbidden says why a request a browser may have sent for a web page is
// refused, or "" when it is not. A page can POST to the endpoint across
// origins without a preflight (text/plain, no Authorization), or from its
// own origin through a DNS name rebound to 127.0.0.1; without a token
// (LoopbackOnly) nothing else would stop it. Those a Wow service sends
// carry no Origin and, on loopback, name a loopback host.
func (in *Ingest) forbidden(req *http.Request) string {
	if in.LoopbackOnly && !loopback.Host(req.Host) {
		return "without wow.ingest.token-file the ingest endpoint answers only requests addressed to a loopback host (127.0.0.1, ::1, localhost)"
	}
	in.mu.Lock()
	if in.cop == nil {
		in.cop = http.NewCrossOriginProtection()
	}
	cop := in.cop
	in.mu.Unlock()
	if cop.Check(req) != nil {
		return "cross-origin requests from a browser are refused"
	}
	return ""
}

// limited reports whether the request is over the rate limit and, if so,
// how long until one would be accepted. A refused request takes nothing
// from the limit.
func (in *Ingest) limited() (time.Duration, bool) {
	if in.Rate == nil {
		return 0, false
	}
	now := time.Now()
	if in.now != nil {
		now = in.now()
	}
	r := in.Rate.ReserveN(now, 1)
	if !r.OK() {
		return time.Second, true // burst 0: nothing passes; the daemon never builds one
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return d, true
	}
	return 0, false
}

// bodyTime is how long a request's body has to arrive.
func (in *Ingest) bodyTime() time.Duration {
	if in.bodyTimeout > 0 {
		return in.bodyTimeout
	}
	return defaultBodyTimeout
}

// retryAfter is the value of a Retry-After header asking to wait d: whole
// seconds, at least one.
func retryAfter(d time.Duration) string {
	return strconv.FormatInt(max(int64((d+time.Second-1)/time.Second), 1), 10)
}

func (in *Ingest) leave() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.requests--; in.requests == 0 && in.idle != nil {
		close(in.idle)
		in.idle = nil
	}
}

// Drain stops the endpoint and waits, until ctx is done, for the requests
// under way to publish their message. Call it after the receivers stopped
// and before the producer closes: a request still waiting for local
// handling by then stops waiting and publishes its message unmarked.
func (in *Ingest) Drain(ctx context.Context) error {
	in.mu.Lock()
	in.stopping = true
	if in.quit == nil {
		in.quit = make(chan struct{})
	}
	select {
	case <-in.quit:
	default:
		close(in.quit)
	}
	if in.requests == 0 {
		in.mu.Unlock()
		return nil
	}
	if in.idle == nil {
		in.idle = make(chan struct{})
	}
	idle := in.idle
	in.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("ingest requests still under way (reading their message or publishing it) at the shutdown deadline: %w", ctx.Err())
	}
}

// response is the JSON answer to a request.
type response struct {
	Topic string `json:"topic,omitempty"`
	// Partition and Offset are where the message was published; nil (left
	// out) when it was not.
	Partition *int32   `json:"partition,omitempty"`
	Offset    *int64   `json:"offset,omitempty"`
	Admitted  int      `json:"admitted_by"`          // receivers that admitted it locally
	Handled   int      `json:"handled_locally"`      // receivers that finished it locally
	Marked    bool     `json:"marked"`               // published marked as handled by some dispatchers: their receivers skip it
	HandledBy []string `json:"handled_by,omitempty"` // the dispatchers that finished it locally, as marked
	Error     string   `json:"error,omitempty"`
}

func (in *Ingest) reply(w http.ResponseWriter, status int, r response) {
	in.replyAs(w, status, outcome(status), r)
}

// replyAs is reply counted as o.
func (in *Ingest) replyAs(w http.ResponseWriter, status int, o metrics.IngestOutcome, r response) {
	in.Metrics.Count(o)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(r)
}

// outcome is the metrics outcome of an answer.
func outcome(status int) metrics.IngestOutcome {
	switch {
	case status == http.StatusAccepted:
		return metrics.IngestAccepted
	case status == http.StatusUnauthorized, status == http.StatusForbidden:
		return metrics.IngestUnauthorized
	case status == http.StatusRequestEntityTooLarge:
		return metrics.IngestTooLarge
	case status == http.StatusTooManyRequests:
		return metrics.IngestRateLimited
	case status == http.StatusServiceUnavailable:
		return metrics.IngestUnavailable
	case status >= 500:
		return metrics.IngestFailed
	default:
		return metrics.IngestRejected
	}
}

// ServeHTTP handles POST /v1/messages/{kind}.
func (in *Ingest) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	// Every request's body has bodyTimeout to arrive, from now on: the
	// refused ones' too. The servers set no ReadTimeout, and net/http
	// reads what a handler left of a body (up to 256 KiB), after it
	// returned, to reuse the connection: without a deadline, a caller
	// refused before its body is read (401, 404, 405, 429, 503) and
	// trickling it would hold its connection as long as it kept on.
	// Past the deadline net/http closes the connection. Answering
	// "Connection: close" to refusals would not do instead: net/http
	// still reads the rest of the body when it closes it. A caller that
	// stalls in its body also holds a slot of max-in-flight, and the stop
	// waits for it: at most bodyTimeout. (Not supported by every
	// ResponseWriter, e.g. a recorder: nothing to bound there.)
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(in.bodyTime()))
	if in.Token != nil && !in.Token.Allows(req) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="wowd ingest"`)
		in.reply(w, http.StatusUnauthorized, response{Error: "a bearer token is required (Authorization: Bearer <token>); this one is missing or wrong"})
		return
	}
	if why := in.forbidden(req); why != "" {
		in.replyAs(w, http.StatusForbidden, metrics.IngestUnauthorized, response{Error: why})
		return
	}
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		in.reply(w, http.StatusMethodNotAllowed, response{Error: "POST a Wow message"})
		return
	}
	kind, err := handler.ParseKind(strings.TrimPrefix(req.URL.Path, Path))
	if err != nil {
		in.reply(w, http.StatusNotFound, response{Error: "POST " + Path + "command, event or state: " + err.Error()})
		return
	}
	quit, e := in.enter()
	switch e {
	case stopping:
		w.Header().Set("Retry-After", "5")
		in.reply(w, http.StatusServiceUnavailable, response{Error: "wowd is stopping"})
		return
	case busy:
		w.Header().Set("Retry-After", "1")
		in.replyAs(w, http.StatusServiceUnavailable, metrics.IngestBusy, response{Error: fmt.Sprintf("%d ingest requests are under way already (wow.ingest.max-in-flight); retry later", in.MaxInFlight)})
		return
	}
	defer in.leave()
	// After the refusals that publish nothing (an unknown kind, stopping,
	// busy): they take no token from the messages that go on.
	if wait, over := in.limited(); over {
		w.Header().Set("Retry-After", retryAfter(wait))
		in.reply(w, http.StatusTooManyRequests, response{Error: "over the ingest rate limit (wow.ingest.rate-limit); retry later"})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, MaxBody))
	if err != nil {
		status := http.StatusBadRequest
		if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
			status = http.StatusRequestEntityTooLarge
		}
		in.reply(w, status, response{Error: fmt.Sprintf("reading the message: %v", err)})
		return
	}
	// JSON text is UTF-8 (RFC 8259), as Wow writes and reads it: Jackson
	// refuses other bytes, and Wow's default decode-failure handler stops
	// the receive stream at such a record. Nor would the copy be what is
	// handled here: marking it writes U+FFFD for the stray bytes of keys
	// and header values, which may merge two keys.
	if !utf8.Valid(body) {
		in.reply(w, http.StatusBadRequest, response{Error: "the message is not valid UTF-8, as JSON text and Wow messages are"})
		return
	}
	// Nor does Jackson read what its default read limits refuse, which
	// wowd's decoder takes.
	if why := beyondJacksonLimits(body); why != "" {
		in.reply(w, http.StatusBadRequest, response{Error: "the message " + why + ", beyond what Jackson, which Wow reads it with, reads by default"})
		return
	}
	var m wow.Message
	if err := m.Decode(kind, body); err != nil {
		// The decoder refuses a state event without its state or deleted
		// too: a stream posted to the wrong endpoint is told which one.
		var top map[string]json.RawMessage
		if json.Unmarshal(body, &top) == nil {
			if why := kindFits(kind, top); why != nil {
				err = why
			}
		}
		in.reply(w, http.StatusBadRequest, response{Error: err.Error()})
		return
	}
	// Nor does an escaped half of a UTF-16 surrogate pair read the same:
	// wowd reads it as U+FFFD, as encoding/json does, and Jackson keeps the
	// lone surrogate. In the aggregate ID (the record's key) or the names
	// the two would disagree, and Wow stops its receive stream at the
	// mismatch; elsewhere (a body's text) Jackson reads it, and wowd passes
	// the bytes on as posted.
	if routing := m.AggregateID + m.ContextName + m.AggregateName; strings.ContainsRune(routing, utf8.RuneError) {
		if at := loneSurrogate(body); at >= 0 {
			in.reply(w, http.StatusBadRequest, response{Error: fmt.Sprintf("the message's aggregate ID or names hold an escaped half of a UTF-16 surrogate pair without its other half (%s at byte %d), which Wow and wowd read differently", body[at:at+6], at)})
			return
		}
	}
	bc, ok := in.Contexts[m.ContextName]
	if !ok || !contains(bc.Aggregates, m.AggregateName) {
		in.reply(w, http.StatusUnprocessableEntity, response{Error: fmt.Sprintf("aggregate %s of context %s is not configured", m.AggregateName, m.ContextName)})
		return
	}
	// The copy published is the body as posted: wowd's mark is in the
	// record's headers (wowd-handled-by), and the Wow header local_first
	// is the caller's word on Wow's own local handling, which wowd does
	// not do. Set to "true" here, it told the consuming Wow services that
	// have the aggregate local (its owner, for a command) to skip the
	// message as handled by their local bus, which never saw it.
	if err := checkKind(kind, body); err != nil {
		in.reply(w, http.StatusBadRequest, response{Error: err.Error()})
		return
	}
	topic := wow.Topic(in.TopicPrefix, bc.Alias, m.AggregateName, kind)
	var routing []Receiver // those that consume the topic
	for _, r := range in.Receivers {
		if r.Routes(topic) {
			routing = append(routing, r)
		}
	}
	if refusal, err := in.fits(req.Context(), topic, m.AggregateID, body, routing); err != nil {
		// Its size cannot be checked yet (the topic missing, its limit
		// unread for now): nothing is handled or published.
		w.Header().Set("Retry-After", "5")
		in.reply(w, http.StatusServiceUnavailable, response{Topic: topic, Error: fmt.Sprintf("%v; nothing was handled or published", err)})
		return
	} else if refusal != "" {
		in.reply(w, http.StatusRequestEntityTooLarge, response{Topic: topic, Error: refusal})
		return
	}
	// No position in Kafka yet: handlers see partition and offset -1.
	local := &kgo.Record{Topic: topic, Partition: -1, Offset: -1, Key: []byte(m.AggregateID), Value: body, Timestamp: time.Now()}

	// Admit it to every receiver that consumes its topic. Waiting here for
	// room in a receiver's window is the caller's backpressure.
	var (
		admitted []receiver.Admitted
		refused  error
	)
	wanted := len(routing)
	for _, r := range routing {
		a, err := r.Admit(req.Context(), local)
		if err != nil {
			refused = err
			break
		}
		admitted = append(admitted, a)
	}
	if refused != nil && len(admitted) == 0 {
		// Nothing is queued: the caller retries, nothing is published.
		if errors.Is(refused, receiver.ErrStopping) {
			w.Header().Set("Retry-After", "5")
		}
		in.reply(w, http.StatusServiceUnavailable, response{Error: fmt.Sprintf("admitting: %v", refused)})
		return
	}
	// Each receiver is told where the copy went, or that it did not go,
	// exactly once: tell reports the publish to those not told yet, and a
	// panic on the way (recovered by net/http) reports "not published" to
	// the rest, so that no hold waits for a copy nobody will report.
	var (
		notTaken     []Receiver
		told, toldNT int  // how many of admitted and of notTaken were told
		pubOK        bool // the copy is in Kafka, at pubPart and pubOff
		pubPart      int32
		pubOff       int64
	)
	tell := func() {
		for told < len(admitted) {
			a := admitted[told]
			told++
			if pubOK {
				a.Published(pubPart, pubOff) // nothing to do once finished
			} else {
				a.NotPublished() // those that gave it up: nothing to wait for
			}
		}
		for toldNT < len(notTaken) {
			r := notTaken[toldNT]
			toldNT++
			if pubOK {
				r.Published(topic, m.AggregateID, pubPart, pubOff)
			} else {
				r.NotPublished(topic, m.AggregateID)
			}
		}
	}
	defer tell()
	// The receivers that did not take it handle its copy from Kafka: from
	// now on, not only once it is published (which waits for the others'
	// handlers), their later local records of the aggregate must not run
	// ahead of it.
	for i, r := range routing[len(admitted):] {
		notTaken = routing[len(admitted) : len(admitted)+i+1]
		r.Refused(topic, m.AggregateID)
	}

	// From here the message is queued locally: it is published whatever the
	// caller does. A dispatcher may be listed in its mark only if its
	// receiver finished it.
	var handledBy []string
	for i, a := range admitted {
		select {
		case <-a.Done():
		case <-quit:
		}
		if a.Finished() {
			handledBy = append(handledBy, routing[i].Dispatcher())
		}
	}
	handled := len(handledBy)
	out := &kgo.Record{Topic: topic, Key: []byte(m.AggregateID), Value: body}
	mark := handled > 0
	if mark {
		slices.Sort(handledBy)
		out.Headers = []kgo.RecordHeader{
			{Key: receiver.HeaderHandledBy, Value: []byte(in.Service)},
			{Key: receiver.HeaderHandledDispatchers, Value: []byte(strings.Join(handledBy, ","))},
		}
	}
	if handled < wanted {
		in.Log.Warn("an ingested message was not handled locally by every receiver; the ones that did not handle it from Kafka",
			zap.String("topic", topic), zap.String("aggregate_id", m.AggregateID), zap.Strings("handled_by", handledBy),
			zap.Int("receivers", wanted), zap.Int("handled_locally", handled), zap.NamedError("refused", refused))
	}
	if m.CreateTime > 0 {
		out.Timestamp = time.UnixMilli(m.CreateTime)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(req.Context()), publishTimeout)
	defer cancel()
	res := in.Producer.ProduceSync(ctx, out)
	if err := res.FirstErr(); err != nil {
		tell()
		in.Log.Error("publishing an ingested message failed after it was admitted locally",
			zap.String("topic", topic), zap.String("aggregate_id", m.AggregateID), zap.Int("handled_locally", handled), zap.Error(err))
		in.reply(w, http.StatusBadGateway, response{Topic: topic, Admitted: len(admitted), Handled: handled,
			Error: fmt.Sprintf("handled locally by %d of %d receivers, but publishing to %s failed (retry: it may be handled again): %v",
				handled, wanted, topic, err)})
		return
	}
	rec := res[0].Record
	// The receivers that did not finish it (gave it up, or never took it)
	// handle the copy from Kafka: their later local records of the
	// aggregate must not run ahead of it.
	pubOK, pubPart, pubOff = true, rec.Partition, rec.Offset
	tell()
	w.Header().Set("Location", topic+"/"+strconv.Itoa(int(rec.Partition))+"/"+strconv.FormatInt(rec.Offset, 10))
	in.reply(w, http.StatusAccepted, response{Topic: topic, Partition: &rec.Partition, Offset: &rec.Offset,
		Admitted: len(admitted), Handled: handled, Marked: mark, HandledBy: handledBy})
}

// fits says why the message, value, published to topic with its mark, would be
// refused for its size, or "" when it fits: with every receiver of the
// topic (routing) listed in its mark, as large as it can be. It is asked
// before the message is admitted anywhere: handled locally and then
// refused by Kafka, the message would have run its handlers and never be
// published.
func (in *Ingest) fits(ctx context.Context, topic, key string, value []byte, routing []Receiver) (string, error) {
	limit, read := int32(topicsize.DefaultBatchMax), false
	if in.Sizes != nil {
		var err error
		if limit, read, err = in.Sizes.Limit(ctx, topic); err != nil {
			return "", err
		}
	}
	var names []string
	for _, r := range routing {
		names = append(names, r.Dispatcher())
	}
	out := &kgo.Record{Topic: topic, Key: []byte(key), Value: value}
	if len(names) > 0 {
		out.Headers = []kgo.RecordHeader{
			{Key: receiver.HeaderHandledBy, Value: []byte(in.Service)},
			{Key: receiver.HeaderHandledDispatchers, Value: []byte(strings.Join(names, ","))},
		}
	}
	need := topicsize.RecordBytes(out)
	if need <= int(limit) {
		return "", nil
	}
	of := "its max.message.bytes"
	if !read {
		of = "the Kafka client's default batch limit: wowd could not read the topic's max.message.bytes (it needs DescribeConfigs on it; see the log)"
	}
	return fmt.Sprintf("the message takes %d bytes published to %s (marked as handled here), over its limit of %d bytes (%s); nothing was handled or published", need, topic, limit, of), nil
}

// checkKind refuses a message posted as a kind of message it is not
// (kindFits).
func checkKind(kind wow.Kind, value []byte) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(value, &top); err != nil {
		return fmt.Errorf("reading the message's fields: %w", err)
	}
	return kindFits(kind, top)
}

// kindFits refuses an event message posted as the other kind of event: a
// state event (one with "state") to .event, where Wow's event handlers
// would take it for a domain event stream and handle its events a second
// time, and to .state anything Wow cannot read as a state event: its
// deserializer takes "state" as an object and reads "deleted", and fails
// otherwise (its default decode-failure handler then stops the receive
// stream). The decoder reads both kinds alike, so they are told apart here.
func kindFits(kind wow.Kind, top map[string]json.RawMessage) error {
	state, hasState := top["state"]
	switch {
	case kind == wow.KindEvent && hasState:
		return errors.New(`a state event (it has "state"): POST it to ` + Path + `state; .event topics carry domain event streams`)
	case kind == wow.KindState && !hasState:
		return errors.New(`not a state event (it has no "state"): POST a domain event stream to ` + Path + `event; .state topics carry state events`)
	case kind == wow.KindState && !bytes.HasPrefix(bytes.TrimSpace(state), []byte("{")):
		return errors.New(`a state event's "state" must be the aggregate's state, an object`)
	case kind == wow.KindState && top["deleted"] == nil:
		return errors.New(`a state event needs "deleted" (true once the aggregate is deleted)`)
	}
	return nil
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// loneSurrogate returns the position of the first \u escape in body that is
// half of a surrogate pair without its other half (a high one not followed
// by a low one, or a low one alone), or -1. Backslashes are outside
// strings only in text that is not JSON, which the decoder refuses.
func loneSurrogate(body []byte) int {
	for i := 0; i < len(body); i++ {
		if body[i] != '\\' || i+1 >= len(body) {
			continue
		}
		if body[i+1] != 'u' {
			i++ // \\, \" and the like: the next byte is not an escape
			continue
		}
		r, ok := escapedRune(body, i)
		switch {
		case !ok || !utf16.IsSurrogate(r):
		case r < 0xdc00: // a high half: a low half must follow
			if r2, ok := escapedRune(body, i+6); !ok || utf16.DecodeRune(r, r2) == utf8.RuneError {
				return i
			}
			i += 6
		default: // a low half alone
			return i
		}
		i += 5
	}
	return -1
}

// escapedRune reads the \uXXXX escape at body[i:].
func escapedRune(body []byte, i int) (rune, bool) {
	if i+6 > len(body) || body[i] != '\\' || body[i+1] != 'u' {
		return 0, false
	}
	n, err := strconv.ParseUint(string(body[i+2:i+6]), 16, 16)
	return rune(n), err == nil
}

// Jackson's default read limits (StreamReadConstraints) that a body within
// MaxBody can pass: the nesting depth (Jackson 3's default; Jackson 2's is
// 1,000), the length of a number and of a name (see nameLen).
const (
	jacksonMaxDepth     = 500
	jacksonMaxNumberLen = 1000
	jacksonMaxNameLen   = 50000 // Jackson 2.16 on
)

// nameLen counts the UTF-16 units of a JSON string's raw contents, as
// Jackson counts a name (an escape is one unit, a character beyond the
// Basic Multilingual Plane two): a name is refused only where Jackson
// refuses it.
func nameLen(raw []byte) int {
	n := 0
	for i := 0; i < len(raw); n++ {
		switch {
		case raw[i] == '\\' && i+1 < len(raw) && raw[i+1] == 'u':
			i += 6
		case raw[i] == '\\':
			i += 2
		default:
			c, size := utf8.DecodeRune(raw[i:])
			i += size
			if c > 0xffff {
				n++ // a surrogate pair
			}
		}
	}
	return n
}

// skipSpace returns the position of the first byte at or after i that is
// not JSON white space.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// beyondJacksonLimits says how body, JSON text, goes beyond Jackson's
// default read limits, or "" when it does not. Text that is not JSON is the
// decoder's to refuse.
func beyondJacksonLimits(body []byte) string {
	depth, number := 0, 0
	for i := 0; i < len(body); i++ {
		switch c := body[i]; c {
		case '"':
			number = 0
			start := i + 1
			for i++; i < len(body) && body[i] != '"'; i++ {
				if body[i] == '\\' {
					i++
				}
			}
			if i-start > jacksonMaxNameLen { // bytes: at least its characters
				if j := skipSpace(body, i+1); j < len(body) && body[j] == ':' && nameLen(body[start:min(i, len(body))]) > jacksonMaxNameLen {
					return fmt.Sprintf("has a name longer than %d characters", jacksonMaxNameLen)
				}
			}
		case '{', '[':
			number = 0
			if depth++; depth > jacksonMaxDepth {
				return fmt.Sprintf("nests deeper than %d levels", jacksonMaxDepth)
			}
		case '}', ']':
			number = 0
			depth--
		case '-', '+', '.', 'e', 'E', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			if number++; number > jacksonMaxNumberLen {
				return fmt.Sprintf("has a number longer than %d characters", jacksonMaxNumberLen)
			}
		default:
			number = 0
		}
	}
	return ""
}
