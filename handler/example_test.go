package handler_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/handler/handlertest"
)

// ShoutConfig is the configuration of the shout plugin. The struct tags
// describe each key for decoding, `wowd handlers`, `wowd config print` and
// the generated reference.
type ShoutConfig struct {
	Prefix string `config:"prefix" desc:"Written before each message."`
	Upper  bool   `config:"upper" desc:"Write the value in upper case."`
	Token  string `config:"token" secret:"true" desc:"Masked by wowd config print."`
}

// shout writes each message to out and acknowledges it before Handle
// returns: a synchronous handler. Writing to a terminal does not block for
// long; a handler doing real I/O would implement handler.Blocker.
type shout struct {
	cfg ShoutConfig
	out io.Writer
}

func (s *shout) Handle(ctx context.Context, m *handler.Message, ack handler.Ack) {
	if err := ctx.Err(); err != nil { // the partition was revoked or wowd is stopping
		ack.Done(err)
		return
	}
	v := string(m.Value)
	if s.cfg.Upper {
		v = strings.ToUpper(v)
	}
	_, err := fmt.Fprintf(s.out, "%s%s: %s\n", s.cfg.Prefix, m.AggregateID, v)
	ack.Done(err)
}

// shoutSpec is what a plugin package registers from its init function:
//
//	func init() { handler.Register(shoutSpec()) }
func shoutSpec() handler.Spec {
	return handler.Spec{
		Name:    "shout",
		Summary: "Writes each message to standard output.",
		Config:  func() any { return &ShoutConfig{Prefix: "> "} }, // the defaults
		New: func(cfg any, deps handler.Deps) (handler.Handler, error) {
			return &shout{cfg: *cfg.(*ShoutConfig), out: os.Stdout}, nil
		},
	}
}

// A plugin: its configuration, its spec, registration, and what wowd does
// with them when a dispatcher says `handler: {type: shout, upper: true}`.
func Example_plugin() {
	var reg handler.Registry // wowd uses handler.Default()
	reg.Register(shoutSpec())

	spec, _ := reg.Lookup("shout")
	cfg, err := handlertest.Decode(spec, map[string]any{"upper": true}) // as wowd reads the dispatcher's mapping
	if err != nil {
		panic(err)
	}
	h, err := spec.New(cfg, handler.Deps{Dispatcher: "cart-projection"})
	if err != nil {
		panic(err)
	}
	ack := handler.AckFunc(func(err error) { fmt.Println("outcome:", err) })
	h.Handle(context.Background(), &handler.Message{AggregateID: "cart-1", Value: []byte("item added")}, ack)

	_, err = handlertest.Decode(spec, map[string]any{"uper": true})
	fmt.Println(err)
	// Output:
	// > cart-1: ITEM ADDED
	// outcome: <nil>
	// uper: unknown key
}

// sender stands in for a client library with a callback API, such as a
// Kafka producer: Send returns at once and calls done later, from another
// goroutine.
type sender struct{}

func (sender) Send(ctx context.Context, data []byte, done func(error)) {
	time.AfterFunc(10*time.Millisecond, func() { done(ctx.Err()) })
}

// forward hands each message to the sender and acknowledges it when the
// sender calls back: an asynchronous handler. Handle returns at once, so
// the wowd worker that called it moves on to other aggregates; the
// aggregate's next message waits for the acknowledgement.
type forward struct{ s sender }

func (f forward) Handle(ctx context.Context, m *handler.Message, ack handler.Ack) {
	f.s.Send(ctx, m.Value, func(err error) {
		if err != nil {
			err = fmt.Errorf("forwarding offset %d: %w", m.Offset, err)
		}
		ack.Done(err)
	})
}

// A handler that acknowledges later, from another goroutine.
func Example_asyncAck() {
	h := forward{}
	done := make(chan error, 1)
	h.Handle(context.Background(), &handler.Message{Offset: 7, Value: []byte("{}")}, handler.AckFunc(func(err error) { done <- err }))
	fmt.Println("Handle returned")
	fmt.Println("outcome:", <-done)

	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a revoke while the send is under way: given up, delivered again later
	h.Handle(ctx, &handler.Message{Offset: 8}, handler.AckFunc(func(err error) { done <- err }))
	fmt.Println("outcome:", <-done)
	// Output:
	// Handle returned
	// outcome: <nil>
	// outcome: forwarding offset 8: context canceled
}

// printRetries is an Observer; wowd passes its own in Deps.Observer.
type printRetries struct{}

func (printRetries) Retrying(m *handler.Message, attempt int, err error, _ time.Duration) {
	fmt.Printf("offset %d: attempt %d failed (%v); retrying\n", m.Offset, attempt, err)
}

// A handler whose first two attempts fail, wrapped to retry transient
// failures.
func ExampleWithRetry() {
	attempts := 0
	flaky := handler.Sync(func(ctx context.Context, m *handler.Message) error {
		attempts++
		if attempts <= 2 {
			return errors.New("connection refused") // unclassified: transient
		}
		return nil
	})
	h := handler.WithRetry(flaky, handler.RetryPolicy{
		MaxAttempts: 5,
		Initial:     time.Millisecond,
		Max:         10 * time.Millisecond,
		Observer:    printRetries{},
	})
	done := make(chan error, 1)
	h.Handle(context.Background(), &handler.Message{Offset: 3}, handler.AckFunc(func(err error) { done <- err }))
	fmt.Println("outcome:", <-done)
	// Output:
	// offset 3: attempt 1 failed (connection refused); retrying
	// offset 3: attempt 2 failed (connection refused); retrying
	// outcome: <nil>
}

// A handler telling wowd what to do with a message it cannot handle:
// Permanent goes to the dead-letter topic, Skip is acknowledged without
// handling; other errors are transient.
func ExampleClassed() {
	project := handler.Sync(func(ctx context.Context, m *handler.Message) error {
		var ev struct{ Type string }
		if err := json.Unmarshal(m.Value, &ev); err != nil {
			return handler.Classed(handler.Permanent, fmt.Errorf("decoding: %w", err))
		}
		if ev.Type != "ItemAdded" {
			return handler.Classed(handler.Skip, fmt.Errorf("event %s: not projected", ev.Type))
		}
		return nil
	})
	for _, v := range []string{`{"type":"ItemAdded"}`, `{"type":"CartViewed"}`, `{`} {
		project.Handle(context.Background(), &handler.Message{Value: []byte(v)}, handler.AckFunc(func(err error) {
			class, failed := handler.Classify(err)
			fmt.Printf("%-22s failed %-5v class %-9v %v\n", v, failed, class, err)
		}))
	}
	// Output:
	// {"type":"ItemAdded"}   failed false class transient <nil>
	// {"type":"CartViewed"}  failed true  class skip      event CartViewed: not projected
	// {                      failed true  class permanent decoding: unexpected end of JSON input
}
