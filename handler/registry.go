package handler

import (
	"context"
	"fmt"
	"net"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Deps are what wowd hands a handler when it builds one.
type Deps struct {
	// Dispatcher is the name of the dispatcher the handler serves.
	Dispatcher string
	// Service is wow.service.
	Service string
	// Logger is a logger named for the dispatcher and handler.
	Logger *zap.Logger
	// Observer, when set, is told of retries the handler makes internally,
	// so wowd can count and log them. Handlers must check it for nil.
	Observer Observer
	// Timeout is the dispatcher's handler.timeout: the longest wowd waits
	// for one try of a message, from the call (or the end of a retry wait
	// reported to Observer) to its acknowledgement or next retry report,
	// waits for the handler's own limits reported to a [WaitObserver] left
	// out.
	// 0 means no deadline. A handler whose own limits cannot fit in it
	// should refuse to be built.
	Timeout time.Duration
	// Dial, when set, opens the handler's network connections in place of
	// the system's dialer (a net.Dialer): an in-memory network in tests, a
	// dialer through a proxy. A handler that connects somewhere uses it
	// when it is set, for the destination's own address: proxy settings
	// from the environment (HTTP_PROXY and the like) do not apply on top
	// of it. wowd itself leaves it nil.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
}

// Observer receives events from handlers that retry internally.
type Observer interface {
	// Retrying reports that attempt (1-based) of m failed with err and the
	// handler will try again after wait. m must be the pointer Handle was
	// given, not a copy: wowd finds the try by it (to restart its
	// deadline after the wait), and ignores a report it cannot place.
	Retrying(m *Message, attempt int, err error, wait time.Duration)
}

// WaitObserver is an [Observer] that is also told when an attempt of a
// message waits for the handler's own limits before it starts (a rate
// limit, a cap on requests in flight): wowd does not count that wait
// against the try's deadline ([Deps].Timeout), which then bounds the
// attempts themselves, not the queue the handler keeps. Waiting reports
// that m's attempt waits; Started, that the attempt reported waiting
// starts. ctx is the context Handle was given (or one derived from it),
// which names the try, and m the message; a handler calls Started only
// after its Waiting returned, and before the attempt's outcome. A handler
// may report while holding its own locks (the http sink does for a
// batch's members): the methods return promptly and never call the
// handler.
type WaitObserver interface {
	Observer
	Waiting(ctx context.Context, m *Message)
	Started(ctx context.Context, m *Message)
}

// PanicObserver is an [Observer] that is also told of a panic of a handler
// [WithRetry] wraps that came after the attempt had reported the message's
// outcome. That outcome stands; WithRetry recovers the panic (a retry runs
// on a timer's goroutine, where a panic would end the process), and without
// this it would go unseen. The message is named by where it was (its
// Context, Topic, Partition and Offset, read when WithRetry got it): it is
// no longer the handler's.
type PanicObserver interface {
	Observer
	PanickedAfterOutcome(context, topic string, partition int32, offset int64, err error)
}

// Spec describes a handler type: its name, its configuration and how to build it.
type Spec struct {
	// Name is the value of `handler.type` that selects this handler.
	Name string
	// Summary is one line for documentation and `wowd handlers`.
	Summary string
	// Config returns a new configuration value: a pointer to a struct holding
	// the defaults; nil means the handler takes no configuration. Its fields
	// are the keys of the dispatcher's handler mapping, described by struct
	// tags:
	//
	//	URL     string        `config:"url" required:"true" desc:"Where to POST messages."`
	//	Timeout time.Duration `config:"request-timeout" desc:"Per-request timeout."`
	//	Token   string        `config:"token" secret:"true" desc:"Bearer token."`
	//
	// The same tags drive strict decoding (an unknown key is an error),
	// `wowd config validate`, secret masking in `wowd config print` and the
	// generated reference. A nested struct is a nested mapping. A value that
	// implements [Validator] is checked after decoding.
	Config func() any
	// New builds a handler from a decoded, validated configuration (the value
	// Config returned, filled from YAML).
	New func(cfg any, deps Deps) (Handler, error)
	// RoutingOnly says the handler reads no more of [Message.Wow] than the
	// routing fields: ContextName, AggregateName, AggregateID, Name and
	// Events. wowd then checks and routes a Wow message without decoding
	// the rest of it (several times cheaper), and leaves the other fields
	// zero. Such a handler also accepts values whose unread parts are
	// malformed (a bad number or escape in a field wowd does not read):
	// only the structure and the routing fields are checked.
	RoutingOnly bool
}

// Registry holds handler specs by name. The zero value is ready to use; most
// programs use [Default].
type Registry struct {
	mu    sync.RWMutex // guards specs
	specs map[string]Spec
}

var defaultRegistry Registry

// Default returns the process-wide registry that compiled-in handlers
// register into from init functions.
func Default() *Registry { return &defaultRegistry }

// Register adds spec to the default registry. It panics on a programming
// error (empty name, nil New, duplicate name), as a registration from init
// can report nothing else.
func Register(spec Spec) { defaultRegistry.Register(spec) }

// Register adds spec to r; see the package-level Register.
func (r *Registry) Register(spec Spec) {
	if spec.Name == "" {
		panic("handler: Register with an empty name")
	}
	if spec.New == nil {
		panic(fmt.Sprintf("handler: Register(%q) with a nil New", spec.Name))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.specs[spec.Name]; dup {
		panic(fmt.Sprintf("handler: Register(%q) called twice", spec.Name))
	}
	if r.specs == nil {
		r.specs = make(map[string]Spec)
	}
	r.specs[spec.Name] = spec
}

// Lookup returns the spec registered under name.
func (r *Registry) Lookup(name string) (Spec, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s, ok := r.specs[name]
	return s, ok
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.specs))
	for n := range r.specs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
