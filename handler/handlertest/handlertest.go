// Package handlertest is a conformance suite for wowd handlers. The HTTP
// sink and Go plugins pass the same checks, so a plugin author can rely on
// wowd treating their handler like the built-ins:
//
//	func TestConformance(t *testing.T) {
//		handlertest.Run(t, func(t *testing.T, target handlertest.Target) handler.Handler {
//			return handler.WithRetry(myHandler{call: target.Call}, handler.RetryPolicy{MaxAttempts: 3, Initial: time.Millisecond})
//		})
//	}
//
// The suite checks that every message is acknowledged exactly once, and as
// handled only after the target completed it; that the messages of one key,
// handed over one at a time as wowd does, reach the target in order; that
// outcomes are classified (success is nil, a permanent failure is
// [handler.Permanent], a skip is [handler.Skip], transient failures are
// retried and, once exhausted, reported as [handler.Transient] with
// [handler.Attempts]), each message's on its own when several are handed
// over together (as a sink that batches sends them in one request); that a canceled context is acknowledged promptly with
// an error wrapping ctx.Err() and stops the calls to the target; that Handle
// does not block unless the handler is a [handler.Blocker]; and that Close
// acknowledges everything outstanding and leaves no goroutine behind.
//
// The suite uses real time and checks goroutines with goleak: do not run it
// in parallel with other tests.
package handlertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/wowd/wowd/handler"
)

// Timing of the checks.
const (
	ackWithin   = 10 * time.Second       // an outcome that involves retries
	promptly    = 2 * time.Second        // an outcome that must come at once
	blockLimit  = time.Second            // Handle of a non-blocking handler
	inFlight    = 100 * time.Millisecond // a call the handler started just before it acknowledged
	quietPeriod = 300 * time.Millisecond // watched for unwanted calls
	closeWithin = 300 * time.Millisecond // the deadline given to Close
)

// Run runs the whole suite. newHandler is called once per check with a new
// Target and must build a handler that:
//
//   - sends every message to target (target.URL or target.Call);
//   - retries transient failures, giving up after 2 to 5 attempts with
//     backoffs of at most 50ms;
//   - is left to the suite to close (when it is a [handler.Closer]).
func Run(t *testing.T, newHandler func(t *testing.T, target Target) handler.Handler) {
	t.Run("Success", func(t *testing.T) {
		s := start(t, newHandler)
		for off := range int64(5) {
			s.handle(context.Background(), message(fmt.Sprint("k", off), off))
		}
		for off := range int64(5) {
			if err := s.acks.wait(t, off, ackWithin); err != nil {
				t.Errorf("offset %d: %v, want nil", off, err)
			}
			s.wantCalls(off, 1)
		}
	})
	t.Run("Permanent", func(t *testing.T) {
		s := start(t, newHandler)
		s.tg.set(1, failPermanent)
		s.handle(context.Background(), message("k", 1))
		wantClass(t, s.acks.wait(t, 1, ackWithin), handler.Permanent)
		time.Sleep(inFlight)
		s.wantCalls(1, 1)
	})
	t.Run("Skip", func(t *testing.T) {
		s := start(t, newHandler)
		s.tg.set(1, askSkip)
		s.handle(context.Background(), message("k", 1))
		wantClass(t, s.acks.wait(t, 1, ackWithin), handler.Skip)
		time.Sleep(inFlight)
		s.wantCalls(1, 1)
	})
	t.Run("TransientRecovers", func(t *testing.T) {
		s := start(t, newHandler)
		s.tg.set(1, failTransient, succeed)
		s.handle(context.Background(), message("k", 1))
		if err := s.acks.wait(t, 1, ackWithin); err != nil {
			t.Errorf("ack %v, want nil after a retry", err)
		}
		s.wantCalls(1, 2)
	})
	t.Run("TransientExhausted", func(t *testing.T) {
		s := start(t, newHandler)
		s.tg.set(1, failTransient)
		s.handle(context.Background(), message("k", 1))
		err := s.acks.wait(t, 1, ackWithin)
		wantClass(t, err, handler.Transient)
		time.Sleep(inFlight)
		calls := len(s.tg.callsOf(1))
		if n := handler.Attempts(err); n < 1 || n != calls {
			t.Errorf("error %q reports %d attempts; the target saw %d calls", err, n, calls)
		}
	})
	t.Run("MixedOutcomes", func(t *testing.T) {
		// Messages of different keys handed over together, as a sink
		// batching them may send them in one request: each gets its own
		// outcome, and the retried one alone is called again.
		s := start(t, newHandler)
		s.tg.set(1, failTransient, succeed)
		s.tg.set(2, failPermanent)
		s.tg.set(3, askSkip)
		const n = 8
		for off := range int64(n) {
			s.handle(context.Background(), message(fmt.Sprint("k", off), off))
		}
		for off := range int64(n) {
			err := s.acks.wait(t, off, ackWithin)
			switch off {
			case 2:
				wantClass(t, err, handler.Permanent)
			case 3:
				wantClass(t, err, handler.Skip)
			default:
				if err != nil {
					t.Errorf("offset %d: %v, want nil", off, err)
				}
			}
		}
		time.Sleep(inFlight)
		for off := range int64(n) {
			want := 1
			if off == 1 {
				want = 2
			}
			s.wantCalls(off, want)
		}
	})
	t.Run("OrderPerKey", func(t *testing.T) {
		s := start(t, newHandler)
		s.orderPerKey(func(off int64) {
			if off%4 == 3 {
				s.tg.set(off, failTransient, succeed)
			} else {
				s.tg.set(off, pause)
			}
		})
	})
	t.Run("HandleDoesNotBlock", func(t *testing.T) {
		s := start(t, newHandler)
		if s.blocking {
			t.Skip("the handler is a Blocker")
		}
		for off := range int64(20) {
			s.tg.set(off, hang, succeed)
			s.handle(context.Background(), message(fmt.Sprint("k", off), off))
		}
		s.tg.release()
		for off := range int64(20) {
			if err := s.acks.wait(t, off, ackWithin); err != nil {
				t.Errorf("offset %d: %v, want nil", off, err)
			}
		}
	})
	t.Run("CanceledBeforeHandle", func(t *testing.T) {
		s := start(t, newHandler)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		s.handle(ctx, message("k", 1))
		if err := s.acks.wait(t, 1, promptly); !errors.Is(err, context.Canceled) {
			t.Errorf("ack %v, want an error wrapping context.Canceled", err)
		}
		time.Sleep(inFlight)
		s.wantCalls(1, 0)
	})
	t.Run("CanceledDuringCall", func(t *testing.T) {
		s := start(t, newHandler)
		s.tg.set(1, hang)
		s.cancelDuringCall(1, false)
	})
	t.Run("CanceledAfterFailedAttempt", func(t *testing.T) {
		// The call fails only after the context was canceled: the handler
		// must not retry.
		s := start(t, newHandler)
		s.tg.set(1, gate)
		s.cancelDuringCall(1, true)
	})
	t.Run("Close", func(t *testing.T) {
		tg := newTarget(t)
		leaks := goleak.IgnoreCurrent()
		s := startWith(t, tg, newHandler(t, tg.public()))
		closer, ok := s.h.(handler.Closer)
		if !ok {
			t.Skip("the handler is not a Closer")
		}
		const n = 10
		for off := range int64(n) {
			tg.set(off, hang)
			s.handle(context.Background(), message(fmt.Sprint("k", off), off))
		}
		s.waitFor("a call to the target", func() bool { return len(tg.order()) > 0 })
		closed := s.close(closer)
		if !s.blocking {
			for off := range int64(n) {
				if s.acks.count(off) == 0 {
					t.Errorf("offset %d not acknowledged when Close returned", off)
				}
			}
		}
		// A Blocker's calls in progress belong to the caller: they end when
		// the target lets them.
		tg.release()
		for off := range int64(n) {
			_ = s.acks.wait(t, off, promptly)
			for _, at := range tg.callsOf(off) {
				if at.After(closed.Add(inFlight)) {
					t.Errorf("offset %d: the target was called %v after Close returned", off, at.Sub(closed))
				}
			}
		}
		s.finish()
		if err := goleak.Find(leaks); err != nil {
			t.Errorf("goroutines left after Close: %v", err)
		}
	})
}

// RunStandalone runs the checks that apply to a handler that calls no target
// and succeeds on every message (such as wowd's log and discard handlers):
// exactly one acknowledgement each, in order per key, a prompt answer to a
// canceled context, a Handle that does not block, and a clean Close.
func RunStandalone(t *testing.T, newHandler func(t *testing.T) handler.Handler) {
	t.Run("Success", func(t *testing.T) {
		s := startStandalone(t, newHandler)
		for off := range int64(20) {
			s.handle(context.Background(), message(fmt.Sprint("k", off%3), off))
		}
		for off := range int64(20) {
			if err := s.acks.wait(t, off, promptly); err != nil {
				t.Errorf("offset %d: %v, want nil", off, err)
			}
		}
	})
	t.Run("OrderPerKey", func(t *testing.T) {
		s := startStandalone(t, newHandler)
		s.orderPerKey(func(int64) {})
	})
	t.Run("CanceledBeforeHandle", func(t *testing.T) {
		s := startStandalone(t, newHandler)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		s.handle(ctx, message("k", 1))
		if err := s.acks.wait(t, 1, promptly); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("ack %v, want nil or an error wrapping context.Canceled", err)
		}
	})
	t.Run("Close", func(t *testing.T) {
		tg := newTarget(t)
		leaks := goleak.IgnoreCurrent()
		s := startWith(t, tg, newHandler(t))
		s.acks.tg = nil
		for off := range int64(10) {
			s.handle(context.Background(), message("k", off))
		}
		for off := range int64(10) {
			_ = s.acks.wait(t, off, promptly)
		}
		if c, ok := s.h.(handler.Closer); ok {
			s.close(c)
		}
		s.finish()
		if err := goleak.Find(leaks); err != nil {
			t.Errorf("goroutines left after Close: %v", err)
		}
	})
}

// run is one check: a target, the handler under test and its outcomes.
type run struct {
	t        *testing.T
	tg       *target
	h        handler.Handler
	blocking bool
	acks     *recorder
	blocked  bool           // a Handle that should not block did; set by the check's goroutine
	handles  sync.WaitGroup // Handle calls, made in goroutines
	once     sync.Once      // runs the end of the check
}

func start(t *testing.T, newHandler func(t *testing.T, target Target) handler.Handler) *run {
	tg := newTarget(t)
	return startWith(t, tg, newHandler(t, tg.public()))
}

// startStandalone starts a check of a handler that calls no target.
func startStandalone(t *testing.T, newHandler func(t *testing.T) handler.Handler) *run {
	s := startWith(t, newTarget(t), newHandler(t))
	s.acks.tg = nil
	return s
}

func startWith(t *testing.T, tg *target, h handler.Handler) *run {
	t.Helper()
	if h == nil {
		t.Fatal("newHandler returned nil")
	}
	s := &run{t: t, tg: tg, h: h, acks: newRecorder(t, tg)}
	if b, ok := h.(handler.Blocker); ok {
		s.blocking = b.Blocking()
	}
	t.Cleanup(s.finish)
	return s
}

// handle hands m to the handler as wowd does: a Blocker on a goroutine of
// its own, other handlers inline, checking that Handle returns promptly. (To
// survive a handler that blocks anyway, the call is made on a goroutine and
// waited for.)
func (s *run) handle(ctx context.Context, m *handler.Message) {
	ack := s.acks.ack(m.Offset)
	returned := make(chan struct{})
	s.handles.Add(1)
	go func() {
		defer s.handles.Done()
		defer close(returned)
		s.h.Handle(ctx, m, ack)
	}()
	if s.blocking || s.blocked {
		return
	}
	select {
	case <-returned:
	case <-time.After(blockLimit):
		s.blocked = true // report it once
		s.t.Errorf("Handle of offset %d blocked for more than %v; a handler that blocks must implement handler.Blocker", m.Offset, blockLimit)
	}
}

// close closes the handler with a deadline of closeWithin and returns when
// Close returned, failing the check if it does not return in time.
func (s *run) close(c handler.Closer) time.Time {
	ctx, cancel := context.WithTimeout(context.Background(), closeWithin)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- c.Close(ctx) }()
	select {
	case err := <-closed:
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			s.t.Errorf("close: %v", err)
		}
	case <-time.After(closeWithin + promptly):
		s.t.Errorf("Close did not return within %v with a deadline of %v", closeWithin+promptly, closeWithin)
	}
	return time.Now()
}

// finish ends the check: it closes the handler (when it is a Closer and was
// not closed), releases the target and waits for the Handle calls made on
// goroutines. It runs once, at the end of the check at the latest.
func (s *run) finish() {
	s.once.Do(func() {
		if c, ok := s.h.(handler.Closer); ok {
			s.close(c)
		}
		s.tg.release()
		done := make(chan struct{})
		go func() {
			s.handles.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(ackWithin):
			s.t.Error("Handle calls still running at the end of the check")
		}
		time.Sleep(10 * time.Millisecond) // a last chance for duplicate acks
		s.acks.end()
	})
}

// orderPerKey hands 15 messages of each of 6 keys to the handler, the next
// of a key only after the previous one was acknowledged, as wowd does, and
// checks that each is handled and that the target saw each key's messages
// in order. script prepares the target for an offset.
func (s *run) orderPerKey(script func(off int64)) {
	const keys, perKey = 6, 15
	var wg sync.WaitGroup
	for k := range int64(keys) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range int64(perKey) {
				off := k*perKey + i
				script(off)
				ack := s.acks.ack(off)
				s.h.Handle(context.Background(), message(fmt.Sprint("key-", k), off), ack)
				if err := s.acks.wait(s.t, off, ackWithin); err != nil {
					s.t.Errorf("offset %d: %v, want nil", off, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	last := make(map[int64]int64) // key -> offset of its last call
	for _, off := range s.tg.order() {
		k := off / perKey
		if prev, ok := last[k]; ok && off < prev {
			s.t.Errorf("key %d: the target got offset %d after offset %d", k, off, prev)
		}
		last[k] = off
	}
}

// cancelDuringCall cancels the context of the message at offset while the
// target holds its call, and checks it is acknowledged promptly with the
// cancellation and not called again. release lets the held call end after
// the cancellation.
func (s *run) cancelDuringCall(offset int64, release bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.handle(ctx, message("k", offset))
	s.waitFor("the call to the target", func() bool { return len(s.tg.callsOf(offset)) > 0 })
	cancel()
	if release {
		s.tg.release()
	}
	if err := s.acks.wait(s.t, offset, promptly); !errors.Is(err, context.Canceled) {
		s.t.Errorf("ack %v, want an error wrapping context.Canceled", err)
	}
	acked := time.Now()
	time.Sleep(quietPeriod)
	for _, at := range s.tg.callsOf(offset) {
		if at.After(acked.Add(inFlight)) {
			s.t.Errorf("the target was called %v after the message was acknowledged as canceled", at.Sub(acked))
		}
	}
}

// wantCalls checks the target got n calls for offset.
func (s *run) wantCalls(offset int64, n int) {
	s.t.Helper()
	if got := len(s.tg.callsOf(offset)); got != n {
		s.t.Errorf("offset %d: the target got %d calls, want %d", offset, got, n)
	}
}

// waitFor polls cond until it holds, failing the check after ackWithin.
func (s *run) waitFor(what string, cond func() bool) {
	s.t.Helper()
	for deadline := time.Now().Add(ackWithin); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			s.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func wantClass(t *testing.T, err error, want handler.Class) {
	t.Helper()
	if got, ok := handler.Classify(err); !ok || got != want {
		t.Errorf("ack %v (class %v), want a %v error", err, got, want)
	}
}

// message returns a message of the aggregate key at offset.
func message(key string, offset int64) *handler.Message {
	return &handler.Message{
		Dispatcher:  "conformance",
		Service:     "handlertest",
		Context:     "test",
		Aggregate:   "thing",
		Kind:        handler.KindEvent,
		AggregateID: key,
		Topic:       "wow.test.thing.event",
		Partition:   0,
		Offset:      offset,
		Key:         []byte(key),
		Value:       fmt.Appendf(nil, `{"offset":%d}`, offset),
		Timestamp:   time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	}
}

// recorder records the acknowledgements of messages by offset. It fails the
// check when one is acknowledged twice, or as handled before the target
// completed it.
type recorder struct {
	t  *testing.T
	tg *target // nil when the handler calls no target

	mu   sync.Mutex         // guards got and over
	got  map[int64]*outcome // by offset
	over bool               // the check ended: report nothing more
}

// outcome is the acknowledgement of one message.
type outcome struct {
	n    int           // acknowledgements
	err  error         // the first outcome
	done chan struct{} // closed at the first acknowledgement
}

func newRecorder(t *testing.T, tg *target) *recorder {
	return &recorder{t: t, tg: tg, got: make(map[int64]*outcome)}
}

func (r *recorder) outcome(offset int64) *outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	o, ok := r.got[offset]
	if !ok {
		o = &outcome{done: make(chan struct{})}
		r.got[offset] = o
	}
	return o
}

// ack returns the Ack of the message at offset.
func (r *recorder) ack(offset int64) handler.Ack {
	o := r.outcome(offset)
	return handler.AckFunc(func(err error) {
		// Checked before taking mu: the target has its own lock.
		early := err == nil && r.tg != nil && !r.tg.hasSucceeded(offset)
		r.mu.Lock()
		defer r.mu.Unlock()
		o.n++
		if o.n == 1 {
			o.err = err
			close(o.done)
		}
		if r.over {
			return
		}
		if o.n > 1 {
			r.t.Errorf("offset %d acknowledged %d times (now with %v)", offset, o.n, err)
		}
		if early {
			r.t.Errorf("offset %d acknowledged as handled before the target completed it", offset)
		}
	})
}

// errNoAck is what wait returns for a message not acknowledged in time.
var errNoAck = errors.New("handlertest: not acknowledged")

// wait returns the outcome of the message at offset. If it does not come
// within d, it fails the check (it may run on any goroutine) and returns
// errNoAck.
func (r *recorder) wait(t *testing.T, offset int64, d time.Duration) error {
	t.Helper()
	o := r.outcome(offset)
	select {
	case <-o.done:
		r.mu.Lock()
		defer r.mu.Unlock()
		return o.err
	case <-time.After(d):
		t.Errorf("offset %d not acknowledged within %v", offset, d)
		return errNoAck
	}
}

// count returns how often the message at offset was acknowledged.
func (r *recorder) count(offset int64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if o, ok := r.got[offset]; ok {
		return o.n
	}
	return 0
}

// end stops reporting: the check is over.
func (r *recorder) end() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.over = true
}
