package receiver

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/executor"
)

// tryContext is the context a handler gets for one try: its partition's
// context, ended on its own when the try's deadline passes (the deadline
// watcher took the try: DeadlineExceeded), when its partition's
// incarnation closes (Canceled) or when its outcome is taken (its Ack, a
// panic: Canceled). A handler that stops on cancellation
// stops a try wowd gave up on: the HTTP sink drops a queued request,
// handler.WithRetry stops retrying. Nothing is registered with the
// partition's context: closing a partition ends the tries it holds itself
// (closePartition), so a try costs one small allocation and no lock of the
// partition's.
//
// context.AfterFunc on a tryContext calls its AfterFunc method, so that the
// wrappers that watch their message's cancellation cost no goroutine.
type tryContext struct {
	p    *partition      // fixed
	vals context.Context // fixed: answers Value when not nil (the message's trace context, over p.ctx)
	// pool is fixed: where the message's handler runs, when that is the
	// executor's blocking pool (handler.Resumer); zero otherwise.
	pool executor.Resume
	// before is fixed: the handler attempts of the record's earlier tries
	// (handler.AttemptsBefore), 0 on its first.
	before int
	// j and token are fixed: the job and the token of the attempt the try
	// is made for, so that a report naming the try by its context
	// (Receiver.Waiting) finds its attempt without a search.
	j     *job
	token uint64
	// calls counts the try's calls of the handler still running: its
	// Handle, and what a Blocker runs through its Resumer (the attempts
	// handler.WithRetry makes after a backoff). A held retry waits for
	// the calls of a try the deadline gave up on to return (job.retry).
	calls atomic.Int32

	mu    sync.Mutex // guards done, err, funcs and nextID
	done  chan struct{}
	err   error
	funcs []afterFunc
	next  uint64
}

type afterFunc struct {
	id uint64
	f  func()
}

func newTry(p *partition) *tryContext { return &tryContext{p: p} }

// tryKey is the context key under which a try's context gives itself, to
// a report that names the try by a context derived from it.
type tryKey struct{}

// tryOf returns the try whose context ctx is or derives from, or nil.
func tryOf(ctx context.Context) *tryContext {
	if ctx == nil {
		return nil
	}
	tc, _ := ctx.Value(tryKey{}).(*tryContext)
	return tc
}

var _ context.Context = (*tryContext)(nil)

// Deadline returns the partition context's deadline (none): the try's own
// limit moves when the handler reports a retry.
func (c *tryContext) Deadline() (time.Time, bool) { return c.p.ctx.Deadline() }

// Done returns a channel closed when the try ends.
func (c *tryContext) Done() <-chan struct{} {
	c.mu.Lock()
	if c.done == nil {
		c.done = make(chan struct{})
		if c.err != nil {
			close(c.done)
		}
	}
	done, running := c.done, c.err == nil
	c.mu.Unlock()
	if running {
		c.Err() // ends it if its partition has gone already
	}
	return done
}

// Err returns why the try ended, or nil while it runs. A try whose
// partition's context ended is ended here with it, so that Done is closed
// whenever Err reports an error, as a context's must: closePartition ends
// the tries of the jobs it finds, a moment after it cancels the partition,
// but a job that finishes meanwhile (its handler saw Err and acknowledged)
// is no longer there to be found, and a handler that saw Err and then
// waited for Done (handler.WithRetry did) would wait forever.
func (c *tryContext) Err() error {
	c.mu.Lock()
	err := c.err
	c.mu.Unlock()
	if err == nil {
		if err = c.p.ctx.Err(); err != nil {
			c.end(err)
		}
	}
	return err
}

// Value returns the partition context's value for key, or the message's
// span context (package tracing), or, for a Blocker, its handler.Resumer:
// the blocking pool, where handler.WithRetry makes its attempts after a
// backoff without holding a goroutine of the pool while it waits; or the
// attempts of the record's earlier tries (handler.AttemptsBefore).
func (c *tryContext) Value(key any) any {
	switch key.(type) {
	case tryKey:
		return c
	case handler.ResumerKey:
		if c.pool != (executor.Resume{}) {
			return tryResumer{c}
		}
	case handler.AttemptsBeforeKey:
		if c.before > 0 {
			return c.before
		}
		return nil
	}
	if c.vals != nil {
		return c.vals.Value(key)
	}
	return c.p.ctx.Value(key)
}

// AfterFunc arranges for f to run in its own goroutine once the try ends,
// as context.AfterFunc does; stop unregisters it and reports whether it did
// so before f was started.
func (c *tryContext) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	c.next++
	id := c.next
	c.funcs = append(c.funcs, afterFunc{id: id, f: f})
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, af := range c.funcs {
			if af.id == id {
				c.funcs = append(c.funcs[:i], c.funcs[i+1:]...)
				return true
			}
		}
		return false
	}
}

// end ends the try with err; later calls change nothing.
func (c *tryContext) end(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	if c.done != nil {
		close(c.done)
	}
	funcs := c.funcs
	c.funcs = nil
	c.mu.Unlock()
	for _, af := range funcs {
		go af.f()
	}
}

// tryResumer is the handler.Resumer of a Blocker's try: more of the
// message runs on the executor's blocking pool (Resume.Again), counted
// among the try's calls while it runs.
type tryResumer struct{ c *tryContext }

// Resume implements handler.Resumer.
func (r tryResumer) Resume(fn, dropped func()) {
	c := r.c
	c.pool.Again(func() {
		c.calls.Add(1)
		defer c.calls.Add(-1)
		fn()
	}, dropped)
}
