package executor

import (
	"sync"
	"sync/atomic"
)

// blockingPool runs tasks of blocking groups on at most max goroutines,
// started on demand. A task waiting here holds no worker; its mailbox is
// owned by the pool until the task completes.
type blockingPool struct {
	ex  *Executor
	max int

	mu      sync.Mutex // guards q, started, idle, stopped
	cond    sync.Cond  // signalled when q grows or the pool stops
	q       []blockingJob
	started int // goroutines alive
	idle    int // goroutines waiting on cond
	stopped bool

	running atomic.Int64 // tasks inside Run
}

// blockingJob is a task to run as the owner of its mailbox, or fn: more of
// a pending task (Resume.Again), run without changing who owns its mailbox,
// or, if the pool stops first, dropped instead.
type blockingJob struct {
	t           Task
	mb          *mailbox
	fn, dropped func()
}

func (p *blockingPool) init(e *Executor, max int) {
	p.ex, p.max = e, max
	p.cond.L = &p.mu
}

func (p *blockingPool) submit(t Task, mb *mailbox) { p.enqueue(blockingJob{t: t, mb: mb}) }

// again queues fn, more of a pending task (Resume.Again).
func (p *blockingPool) again(fn, dropped func()) {
	p.enqueue(blockingJob{fn: fn, dropped: dropped})
}

func (p *blockingPool) enqueue(j blockingJob) {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		if j.dropped != nil {
			j.dropped()
		}
		return // dropped, as stop drops the queue
	}
	p.q = append(p.q, j)
	if p.idle > 0 {
		p.cond.Signal()
	}
	// idle counts a signalled goroutine until it runs: every job queued
	// before then finds it. A job beyond what the idle goroutines take
	// gets a goroutine of its own, or it would wait behind another key's
	// blocking call with the pool below its bound.
	if len(p.q) > p.idle && p.started < p.max {
		p.started++
		go p.loop()
	}
	p.mu.Unlock()
}

func (p *blockingPool) loop() {
	for {
		p.mu.Lock()
		for len(p.q) == 0 && !p.stopped {
			p.idle++
			p.cond.Wait()
			p.idle--
		}
		if len(p.q) == 0 || p.stopped {
			p.started--
			p.mu.Unlock()
			p.ex.changed.Notify()
			return
		}
		j := p.q[0]
		p.q[0] = blockingJob{}
		p.q = p.q[1:]
		p.mu.Unlock()
		if j.fn != nil {
			p.running.Add(1)
			j.fn()
			p.running.Add(-1)
			continue
		}
		p.run(j)
	}
}

// run runs one task as the owner of its mailbox; the task counts in the
// mailbox's pending tasks until it finished.
func (p *blockingPool) run(j blockingJob) {
	p.running.Add(1)
	st := j.t.Run(Resume{j.mb, p.ex, true})
	p.running.Add(-1)
	failed := st == Failed
	if st == Pending {
		waiting, f := j.mb.released()
		if waiting {
			return
		}
		failed = f
	}
	if failed {
		p.ex.shardOf(j.mb).asyncFailed.Add(1)
	} else {
		p.ex.shardOf(j.mb).asyncCompleted.Add(1)
	}
	p.ex.resume(j.mb)
}

// stop makes idle goroutines return and busy ones return after their task.
// Queued jobs are dropped: stop runs after the drain or its deadline.
func (p *blockingPool) stop() {
	p.mu.Lock()
	p.stopped = true
	q := p.q
	p.q = nil
	p.cond.Broadcast()
	p.mu.Unlock()
	for _, j := range q {
		if j.dropped != nil {
			j.dropped()
		}
	}
}

// live returns the number of goroutines not yet returned.
func (p *blockingPool) live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.started
}
