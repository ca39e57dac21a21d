package receiver

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/metrics"
	"github.com/wowd/wowd/internal/testwait"
)

// TestAPanicAfterTheOutcomeIsCountedThroughWithRetry: a plugin that
// acknowledges from a defer (a common shape: `defer func() { ack.Done(err)
// }()`) and then hits a bug panics after its message was acknowledged. Called
// by wowd directly, the outcome it reported stands and the panic is counted
// in wowd_handler_panics_total and logged with its stack (job.call). Wrapped
// in handler.WithRetry, as plugins are told to wrap themselves (the audit
// example is), the very same panic is recovered inside WithRetry
// (retryCall.try) and was dropped (found by review): no counter, no log,
// the message counted as handled. WithRetry now tells an observer that is
// a handler.PanicObserver, as the daemon's is. docs/operations.md promises the count and the log for a panic in
// Handle "or in a retry that handler.WithRetry makes".
func TestAPanicAfterTheOutcomeIsCountedThroughWithRetry(t *testing.T) {
	// buggy acknowledges from a defer, then panics on the record at
	// offset 3 (in its attempt number panicAt, counted per record).
	buggy := func(panicAt int64) handler.Handler {
		var calls atomic.Int64
		return handlerFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
			var err error
			defer func() { ack.Done(err) }()
			if m.Offset != 3 {
				return
			}
			if calls.Add(1) < panicAt {
				err = errors.New("503") // transient: WithRetry retries it
				return
			}
			var counts map[string]int
			counts[m.AggregateID]++ // the bug: a nil map
		})
	}
	obs := &retryObserver{} // as the daemon passes Deps.Observer
	policy := handler.RetryPolicy{MaxAttempts: 3, Initial: time.Millisecond, Max: time.Millisecond, Observer: obs}
	for _, tc := range []struct {
		name string
		h    handler.Handler
	}{
		{"called by wowd", buggy(1)},
		{"WithRetry, first attempt", handler.WithRetry(buggy(1), policy)},
		{"WithRetry, a retry", handler.WithRetry(buggy(2), policy)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 1)
			produce(t, h.c, testTopic, 6, 6)
			m := metrics.New("test")
			const group = "g-panic-after-outcome"
			r := h.newReceiver(group, tc.h, 16, func(o *Options) { o.Metrics = m })
			obs.r.Store(r)
			r.Start(context.Background())
			testwait.For(t, 10*time.Second, "every record finished", func() bool { return h.committedAtEnd(group) })
			// The panic follows the acknowledgement at once; give it time
			// to be counted all the same.
			deadline := time.Now().Add(3 * time.Second)
			for counterValue(t, m.Registry, "wowd_handler_panics_total") == 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			stop(t, r)
			if n := counterValue(t, m.Registry, "wowd_handler_panics_total"); n != 1 {
				t.Errorf("wowd_handler_panics_total = %v, want 1: the handler panicked (after acknowledging) and nothing counted or logged it", n)
			}
		})
	}
}

// messagesByOutcome returns wowd_messages_total for one outcome.
func messagesByOutcome(t *testing.T, m *metrics.Metrics, outcome string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != "wowd_messages_total" {
			continue
		}
		for _, s := range mf.Metric {
			for _, l := range s.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					sum += s.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// TestAPanicAfterTheOutcomeIsNotLoggedAsAPermanentFailure: a handler that
// acknowledged its message as handled (here from a defer) and then
// panicked has its outcome kept: the message is counted handled and
// committed, nothing is dead-lettered (job.call: "The handler reported an
// outcome before it panicked"). Yet Receiver.panicked logged, at error
// level, "handler panicked; the message fails permanently", with the
// message's offset (found by review): an operator then looks for a dead letter (or a parked or held
// message) that does not exist, while the message went through as handled.
func TestAPanicAfterTheOutcomeIsNotLoggedAsAPermanentFailure(t *testing.T) {
	h := newHarness(t, 1)
	produce(t, h.c, testTopic, 6, 6)
	core, logs := observer.New(zapcore.InfoLevel)
	m := metrics.New("test")
	const group = "g-panic-after-outcome-log"
	r := h.receiver(group, handlerFunc(func(_ context.Context, msg *handler.Message, ack handler.Ack) {
		var err error
		defer func() { ack.Done(err) }()
		if msg.Offset == 3 {
			var counts map[string]int
			counts[msg.AggregateID]++ // the bug: a nil map
		}
	}), 16, func(o *Options) {
		o.Metrics = m
		o.Logger = zap.New(core)
	})
	testwait.For(t, 10*time.Second, "every record finished", func() bool { return h.committedAtEnd(group) })
	testwait.For(t, 3*time.Second, "the panic logged", func() bool { return logs.FilterMessageSnippet("panicked").Len() > 0 })
	stop(t, r)
	if n := messagesByOutcome(t, m, "handled"); n != 6 {
		t.Fatalf("%v messages handled, want 6 (the panicking handler acknowledged all of them)", n)
	}
	if n := messagesByOutcome(t, m, "dead_lettered"); n != 0 {
		t.Fatalf("%v messages dead-lettered, want 0", n)
	}
	for _, e := range logs.FilterMessageSnippet("panicked").All() {
		if strings.Contains(e.Message, "fails permanently") {
			t.Errorf("logged %q (offset %v) for a message that was handled and committed", e.Message, e.ContextMap()["offset"])
		}
	}
}
