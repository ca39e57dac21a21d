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
