package sim

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/wowd/wowd/handler"
)

// In a quarter of the seeds, drawn apart from the others, the members'
// route is a blocking one (a handler.Blocker's: its tries run on the
// executor's blocking pool, of simBlockingWorkers goroutines), and each
// call of the handler's Handle blocks its caller for blockingCall. The
// invariant: no more calls at once than the pool has goroutines, retries
// of held messages and every other path to the handler included. It found
// a parked aggregate's redrive calling the handler on its action's
// goroutine, after a review had found held retries calling it on their
// timers'.

const (
	simBlockingWorkers = 3
	blockingCall       = 2 * time.Millisecond
)

// blockingFor reports whether the seed's members take the blocking route.
// Not from the run's rng: the other choices of a seed stay as they were.
func blockingFor(seed uint64) bool { return mix(seed, 88)%4 == 0 }

// blockingRetryFor reports whether, in a blocking run without the HTTP sink
// (which has WithRetry inside), the members' handler is wrapped in
// handler.WithRetry, as the audit example plugin is: half of them. Its
// retries then wait for the pool after each backoff (handler.Resumer), a
// path to the handler the pool's bound must hold on too.
func blockingRetryFor(seed uint64, w *world) bool {
	return w.blocking && w.sink == nil && (*blockingRetryFlag || mix(seed, 90)%2 == 0)
}

// blockingRetryPolicy is the members' WithRetry in a blocking retry run: a
// transient failure is tried again twice, after 10 to 40 ms, before the
// receiver holds the message.
var blockingRetryPolicy = handler.RetryPolicy{MaxAttempts: 3, Initial: 20 * time.Millisecond, Max: 40 * time.Millisecond}

// blockingProbe is a member's handler in a blocking run: it counts the
// calls of Handle under way across the member and blocks each for
// blockingCall before handing the try on.
type blockingProbe struct {
	w       *world
	member  int
	h       handler.Handler
	running *atomic.Int32 // calls of Handle under way on the member
}

func (p *blockingProbe) Handle(ctx context.Context, m *handler.Message, ack handler.Ack) {
	if n := p.running.Add(1); n > simBlockingWorkers {
		p.w.violate("member %d: %d calls of a blocking handler at once; its pool has %d goroutines", p.member, n, simBlockingWorkers)
	}
	time.Sleep(blockingCall)
	p.running.Add(-1)
	p.h.Handle(ctx, m, ack)
}

// Blocking marks the probe a handler.Blocker, so that handler.WithRetry
// around it makes its attempts on the pool.
func (p *blockingProbe) Blocking() bool { return true }

// tryClock notes when each try of the receiver's began (by its context,
// which handler.WithRetry hands to each of its attempts), so that the
// handler judges an attempt's success late from the try's start, as the
// receiver does, not from the attempt's: WithRetry's second attempt of a
// try may succeed past the try's deadline sooner than handlerTimeout after
// it was called, and the receiver then ignores it and tries again.
type tryClock struct {
	w *world
	h handler.Handler
}

func (c tryClock) Handle(ctx context.Context, m *handler.Message, ack handler.Ack) {
	c.w.tryStart.Store(ctx, time.Now())
	c.h.Handle(ctx, m, ack)
}
