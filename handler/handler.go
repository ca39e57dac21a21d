// Package handler is the public contract between wowd and the code that
// handles its messages: compiled-in Go plugins and the built-in sinks.
//
// A handler receives one [Message] at a time per aggregate ID and reports
// the outcome through the [Ack] it was given, exactly once. It may report
// before Handle returns (a synchronous handler) or later from any goroutine
// (an asynchronous handler: HTTP calls, retry backoff). Until the Ack is
// called, the aggregate's next message does not start, but the worker that
// called Handle is free for other aggregates as soon as Handle returns.
//
// The context Handle gets belongs to that one try. It ends when wowd gives
// the try up: at the dispatcher's handler.timeout ([Deps].Timeout;
// context.DeadlineExceeded), after which the try counts as a transient
// failure, a later Ack is ignored and the aggregate's next try may start;
// or when the message's partition moves to another member
// (context.Canceled). A handler should stop its work then: wowd no longer
// waits for it. It also ends (context.Canceled) once the handler reported
// the try's outcome through its Ack: the try is over, and work bound to
// its context stops with it, as a net/http request's context ends when
// its handler returns.
//
// That context also carries the message's W3C trace context, as an
// OpenTelemetry span context (go.opentelemetry.io/otel/trace
// SpanContextFromContext): the record's valid traceparent and tracestate
// headers, or, with wow.tracing enabled, wowd's span of the message, a
// child of them. OpenTelemetry instrumentation in a handler continues the
// trace without more code.
//
// Handle must not block. A handler that has to block (a synchronous driver,
// a CGO call) implements [Blocker]; wowd then calls it on a bounded pool of
// goroutines set aside for blocking work, never on one of the few shared
// workers.
//
// Handlers are registered by name in a [Registry], usually the [Default]
// one, from an init function that does nothing else:
//
//	func init() { handler.Register(handler.Spec{Name: "audit", Config: ..., New: ...}) }
package handler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/wowd/wowd/internal/ack"
)

// Kind is the kind of Wow message a topic carries.
type Kind uint8

// The message kinds, named as the suffix of their topics.
const (
	KindCommand Kind = iota + 1
	KindEvent
	KindState
)

// String returns the topic suffix of the kind: command, event or state.
func (k Kind) String() string {
	switch k {
	case KindCommand:
		return "command"
	case KindEvent:
		return "event"
	case KindState:
		return "state"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// ParseKind parses a topic suffix.
func ParseKind(s string) (Kind, error) {
	switch s {
	case "command":
		return KindCommand, nil
	case "event":
		return KindEvent, nil
	case "state":
		return KindState, nil
	}
	return 0, fmt.Errorf("unknown message kind %q (want command, event or state)", s)
}

// Header is one Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// Message is one Kafka record routed to a handler. Handlers must treat it as
// read-only and must not keep it after they acknowledged it.
type Message struct {
	Dispatcher  string // the dispatcher that routed it (config key under wow.dispatchers)
	Service     string // wow.service
	Context     string // bounded context name
	Aggregate   string // aggregate name
	Kind        Kind
	AggregateID string // the record key

	Topic string
	// Partition and Offset are the record's position; both -1 for a
	// message taken in through the local-first ingest, which is handled
	// before its copy is published to Kafka.
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []Header
	Timestamp time.Time

	// Wow is the decoded Wow message, for dispatchers with format wow
	// (the default); nil for format raw.
	Wow *Wow
}

// Wow holds what wowd decodes of a Wow message: its identity, routing
// fields, the header map and, for event streams and state events, the names
// of the events it carries. The message body is not decoded; it is in
// Message.Value.
type Wow struct {
	ID            string // the message id
	Name          string // commands: the command name (snake_case)
	ContextName   string
	AggregateName string
	AggregateID   string
	TenantID      string
	RequestID     string
	CommandID     string // event streams and state events: the command that produced them
	Version       int64  // event streams and state events: the aggregate version; commands: aggregateVersion if set
	HasVersion    bool
	CreateTime    time.Time
	Header        []WowHeader // the message's header map, in the order written
	Events        []string    // event streams and state events: event names in order
}

// WowHeader is one entry of a Wow message's header map.
type WowHeader struct {
	Key   string
	Value string
}

// HeaderValue returns the value of a Wow header entry.
func (w *Wow) HeaderValue(key string) (string, bool) {
	for _, h := range w.Header {
		if h.Key == key {
			return h.Value, true
		}
	}
	return "", false
}

// Ack reports the outcome of one message: call its Done method exactly
// once, with nil when the message is handled or an error classified by
// [Classify]. On the Acks wowd gives out, calls after the first are ignored,
// and so are calls made after the message's try ended otherwise (its
// handler.timeout passed).
//
// An Ack is a small value: copying it is cheap and building it allocates
// nothing. Its machinery is internal to wowd; tests and wrappers make their
// own with [AckFunc].
type Ack = ack.Ack

// AckFunc returns an Ack that calls fn with every outcome reported through
// it, so that a test can catch a second acknowledgement (for wrappers and
// tests; it allocates). The Acks wowd gives handlers ignore calls after the
// first.
func AckFunc(fn func(error)) Ack { return ack.New(funcCompleter(fn), 0) }

type funcCompleter func(error)

func (f funcCompleter) Complete(_ uint64, err error) { f(err) }

// Handler handles messages. See the package documentation for the contract.
type Handler interface {
	Handle(ctx context.Context, m *Message, ack Ack)
}

// Sync adapts a synchronous function to a Handler: the function's return
// value is reported as the outcome before Handle returns. (It is not a
// HandlerFunc: Handle's signature has an Ack, this function's does not.)
type Sync func(ctx context.Context, m *Message) error

// Handle calls f and acknowledges with its result.
func (f Sync) Handle(ctx context.Context, m *Message, ack Ack) { ack.Done(f(ctx, m)) }

// Blocker is implemented by handlers whose Handle blocks. wowd runs them on
// its bounded blocking pool.
type Blocker interface {
	Blocking() bool
}

// Resumer is what a runtime that calls [Blocker] handlers on a bounded pool
// of goroutines answers for [ResumerKey] in the context of each call (wowd
// does). Resume runs fn later, on that pool, as more of the same message: a
// wrapper that waits between two attempts ([WithRetry]'s backoff) gives its
// goroutine back to the pool meanwhile, instead of holding it while other
// messages wait for one, and still never calls the handler from a goroutine
// outside the pool. If the pool stops before fn runs, dropped runs instead,
// so that whoever waits for fn hears of it.
type Resumer interface {
	Resume(fn, dropped func())
}

// ResumerKey is the context key under which a [Blocker]'s call finds its
// [Resumer].
type ResumerKey struct{}

// AttemptsBeforeKey is the context key under which wowd gives a handler
// the number of attempts made in the earlier tries of the message (an
// int, above 0; absent on its first try). wowd tries a message again when
// a try failed and the message is held instead of dead-lettered (dead
// letters off, or the sink down): see [AttemptsBefore].
type AttemptsBeforeKey struct{}

// AttemptsBefore returns the attempts made in earlier tries of the message
// whose context ctx is (the attempt counts their failures reported, see
// [Attempts]), 0 on its first try. [WithRetry] numbers its attempts on
// from there.
func AttemptsBefore(ctx context.Context) int {
	n, _ := ctx.Value(AttemptsBeforeKey{}).(int)
	return max(n, 0)
}

// Closer is implemented by handlers holding resources. Close is called once,
// after the handler received its last message.
type Closer interface {
	Close(ctx context.Context) error
}

// ErrPanicked is wrapped by the outcome of a message whose handler panicked
// in Handle: wowd recovers the panic and fails the message permanently,
// with class panic on its dead letter.
var ErrPanicked = errors.New("handler panicked")

// Recovered returns the outcome of a message whose handler panicked with v:
// a Permanent failure wrapping [ErrPanicked] that keeps the stack for the
// log. Wrappers that call a handler from a goroutine of their own (as
// [WithRetry] does for its retries) recover with it.
func Recovered(v any, stack []byte) error {
	return Classed(Permanent, &panicError{value: v, stack: stack})
}

type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string      { return fmt.Sprintf("%v: %v", ErrPanicked, e.value) }
func (e *panicError) Unwrap() error      { return ErrPanicked }
func (e *panicError) PanicStack() []byte { return e.stack }

// Class is the class of a handler failure: what wowd does with the message.
type Class uint8

// Failure classes.
const (
	// Transient failures are retried with backoff (the default for unclassified errors).
	Transient Class = iota
	// Permanent failures are not retried; the message is dead-lettered.
	Permanent
	// Skip acknowledges the message without handling it and without retry.
	Skip
)

// String names the class.
func (c Class) String() string {
	switch c {
	case Transient:
		return "transient"
	case Permanent:
		return "permanent"
	case Skip:
		return "skip"
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

type classified struct {
	class Class
	err   error
}

func (e *classified) Error() string { return e.err.Error() }
func (e *classified) Unwrap() error { return e.err }

// Classed marks err with a failure class. Classed(c, nil) is nil.
func Classed(c Class, err error) error {
	if err == nil {
		return nil
	}
	return &classified{class: c, err: err}
}

// Classify returns the class err carries; errors carry Transient unless
// marked otherwise. A nil error has no class and Classify reports false.
func Classify(err error) (Class, bool) {
	if err == nil {
		return 0, false
	}
	var c *classified
	if errors.As(err, &c) {
		return c.class, true
	}
	return Transient, true
}

// attemptsError carries the number of attempts a handler made.
type attemptsError struct {
	attempts int
	err      error
}

func (e *attemptsError) Error() string { return e.err.Error() }
func (e *attemptsError) Unwrap() error { return e.err }

// WithAttempts records that err is the outcome of n attempts; wowd reports
// it on dead-letter records. WithAttempts(n, nil) is nil.
func WithAttempts(n int, err error) error {
	if err == nil {
		return nil
	}
	return &attemptsError{attempts: n, err: err}
}

// Attempts returns the attempt count recorded with [WithAttempts], or 1.
func Attempts(err error) int {
	var a *attemptsError
	if errors.As(err, &a) {
		return a.attempts
	}
	return 1
}
