// Package executor runs tasks keyed by aggregate ID on a small shared set of
// workers: tasks of one key run one at a time in submission order, tasks of
// different keys run in parallel. It knows nothing of Kafka.
//
// # Model
//
// A mailbox holds the tasks of one (group, key). It counts its pending tasks
// (submitted, not finished): the Submit that raises the count from zero
// activates it and places it on a worker; the owner whose finished tasks
// bring it back to zero lets go of it, touching nothing else. An idle
// mailbox holds no task and counts for nothing; it stays in its shard's
// table, so a key that comes back soon finds it as it was, until the shard
// needs room for a new key or the janitor finds it idle for a second round
// (about one to two seconds); reclaimed mailboxes are pooled. Between
// activation and emptying a mailbox is owned by exactly one party: the
// submitter that activated it until it places it (SubmitBatch holds up to
// 64 activated mailboxes and places them together), a worker's queue, the
// worker running its turn, a task that completes asynchronously, or the
// blocking pool. Submitters never schedule an active mailbox; they
// append to it under the shard lock, one lock per submission.
//
// A turn runs at most Throughput tasks that complete synchronously, then the
// mailbox goes to the back of its worker's queue. A task that returns Pending
// releases the worker at once; its Resume.Complete puts the mailbox back on a
// worker. Groups declared blocking run their tasks on a bounded pool of
// goroutines set aside for blocking work, never on a worker.
//
// # Placement and stealing
//
// A worker's queue is, oldest first, a run queue (filled by the worker,
// taken from by anyone with a CAS, like the Go scheduler's per-P queue), a
// spill for what did not fit, and an inbox: a stack that placement pushes a
// mailbox onto with one CAS and that the worker takes whole with another,
// reversing it into its run queue. The inbox word also says when the worker
// is parked, so a push and a worker going to sleep cannot miss each other.
// A mailbox that becomes runnable goes to a running worker with an empty
// inbox that is not stuck in a long turn, else to a parked worker (woken),
// else to a worker not stuck, counting from one its hash chooses. An idle
// worker steals the oldest queued (not running) mailbox of another worker,
// taking along the rest of that worker's inbox, before it parks; while
// another worker is in a turn it parks with a timeout, marking workers whose
// turn has run long as stuck, so a mailbox queued behind a turn that later
// runs long is still picked up and new ones avoid that worker. A mailbox is
// only ever in one place, so stealing cannot reorder a key.
//
// # Words
//
// Each verb below means one thing in this package:
//
//   - submit: add a task to its key's mailbox (Group.Submit, SubmitBatch).
//   - activate: the submission that raises an idle mailbox's pending count
//     from zero takes it out of idleness and places it.
//   - place: put a runnable mailbox on a worker's queue (or the blocking
//     pool).
//   - turn: a worker runs a mailbox's tasks, up to Throughput of them.
//   - release: a worker lets go of a mailbox whose task returned Pending.
//   - complete: a Pending task reports that it finished (Resume.Complete).
//   - resume: the completion puts the mailbox back on a worker.
//   - settle: count a mailbox's finished tasks and, when none is left, let
//     go of it.
//   - steal: an idle worker takes a mailbox queued behind another worker.
//   - sweep, reclaim: the janitor takes idle mailboxes out of the table and
//     pools them.
//
// # Locks
//
// shard.mu guards a shard's table, free list, counters and every mailbox's
// incoming slice and generation. worker.spillMu guards a worker's spill.
// worker.obsMu guards a worker's turn observation. blockingPool.mu guards
// the blocking pool's queue and counts. Executor.groupMu guards the count of
// groups made (Executor.Group). No code holds two of these locks at once,
// so there is no lock order to respect.
//
// # Goroutines
//
// The Executor owns its workers (one goroutine each, started by New), the
// janitor (one goroutine, started by New) and the blocking pool's goroutines
// (started on demand up to the pool size). Close stops all of them.
package executor

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wowd/wowd/internal/signal"
)

// ErrClosed is returned by Submit once Close has begun.
var ErrClosed = errors.New("executor closed")

// Status is what Task.Run reports.
type Status uint8

const (
	// Done means the task completed successfully before Run returned.
	Done Status = iota
	// Failed means the task completed with a failure before Run returned.
	Failed
	// Pending means the task completes later: the callee calls
	// Resume.Complete exactly once, from any goroutine, possibly even before
	// Run returns.
	Pending
)

// Task is one unit of work for a key.
type Task interface {
	Run(r Resume) Status
}

// Resume completes a task that returned Pending.
type Resume struct {
	mb *mailbox
	ex *Executor
	// blocking: the task runs on the blocking pool. Recorded here, not read
	// from mb: once the task completed, mb may be reclaimed and reused for
	// a key of another group, and a late Again must still go to the pool.
	blocking bool
}

// Complete reports that the pending task finished. It must be called exactly
// once per Pending task. The key's next task may start before Complete
// returns.
func (r Resume) Complete(failed bool) { r.ex.complete(r.mb, failed) }

// Blocking reports whether r's task runs on the blocking pool, where Again
// runs fn too.
func (r Resume) Blocking() bool { return r.blocking }

// Again runs fn as more of the pending task, where its group runs tasks:
// for a blocking group on the blocking pool, waiting for one of its
// goroutines as a task does (so that work a blocking task does later, a
// retry after a wait, stays within the pool's bound); otherwise at once, on
// the caller's goroutine. The task stays pending: Complete is still called
// once, by fn or later. If Close stops the pool before fn ran, dropped runs
// instead (on the caller's goroutine or Close's), so that whoever waits for
// fn hears of it.
func (r Resume) Again(fn, dropped func()) {
	if r.blocking {
		r.ex.blocking.again(fn, dropped)
		return
	}
	fn()
}

// Options configure an Executor.
type Options struct {
	// Workers is the number of workers; 0 means GOMAXPROCS.
	Workers int
	// Throughput is the most tasks a mailbox runs in one turn while they
	// complete synchronously; 0 means 16.
	Throughput int
	// BlockingWorkers bounds the goroutines running tasks of blocking
	// groups; 0 means 64.
	BlockingWorkers int
}

// testHookReleased, when set by a test before New, runs in a worker right
// after it let go of a mailbox whose task completes later.
var testHookReleased func()

// longTurn is how long a turn may run before placement avoids its worker and
// idle workers steal what is queued behind it.
const longTurn = 100 * time.Microsecond

// Executor runs keyed tasks. Build it with New and stop it with Close.
type Executor struct {
	workers    []*worker
	shards     []shard
	shardMask  uint64
	seed       maphash.Seed
	throughput int
	// stopping is set by Close when it stops waiting for the work to
	// drain: from then on no task starts on a worker and no mailbox is
	// placed. If the work drained, none is left to start; otherwise Close
	// gave up on it. Read before every task a worker starts: it sits next
	// to throughput, read as often, and is written once.
	stopping atomic.Bool
	blocking blockingPool

	groupMu sync.Mutex // guards groups
	groups  uint32

	closeOnce   sync.Once
	closeErr    error         // the first Close's result, returned to every Close
	stopCh      chan struct{} // closed with stopping set: wakes parked workers, stops the janitor
	janitorDone chan struct{} // closed when the janitor returns
	live        atomic.Int32  // workers not yet returned
	// changed is notified when a mailbox goes idle and when a worker or a
	// blocking goroutine returns: what Close waits for.
	changed signal.Signal
}

// New starts an executor with its workers.
func New(o Options) *Executor {
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.Throughput <= 0 {
		o.Throughput = 16
	}
	if o.BlockingWorkers <= 0 {
		o.BlockingWorkers = 64
	}
	nshards := 64
	for nshards < 16*o.Workers {
		nshards *= 2
	}
	e := &Executor{
		shards:      make([]shard, nshards),
		shardMask:   uint64(nshards - 1),
		seed:        maphash.MakeSeed(),
		throughput:  o.Throughput,
		stopCh:      make(chan struct{}),
		janitorDone: make(chan struct{}),
	}
	e.blocking.init(e, o.BlockingWorkers)
	e.workers = make([]*worker, o.Workers)
	for i := range e.workers {
		w := &worker{ex: e, id: i, wake: make(chan struct{}, 1)}
		e.workers[i] = w
	}
	e.live.Store(int32(len(e.workers)))
	for _, w := range e.workers {
		go w.loop()
	}
	go e.janitor()
	return e
}

// Close stops admission, waits for queued, running and pending tasks until
// ctx is done, then stops the workers and the blocking pool. It returns an
// error if work was abandoned or a goroutine could not be stopped in time.
// Once it gives up on the work left, no further task starts: a worker or a
// blocking goroutine inside a task returns when the task does, and the
// task's key keeps what is queued behind it. Completions arriving after
// Close are ignored. Close runs once: later calls wait for the first to
// finish and return its result.
func (e *Executor) Close(ctx context.Context) error {
	e.closeOnce.Do(func() { e.closeErr = e.close(ctx) })
	return e.closeErr
}

func (e *Executor) close(ctx context.Context) error {
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		sh.closed = true
		sh.mu.Unlock()
	}
	_ = e.changed.Wait(ctx, func() bool { return e.Stats().Mailboxes == 0 })
	abandoned := e.Stats().Mailboxes
	e.stopping.Store(true)
	close(e.stopCh)
	e.blocking.stop()
	<-e.janitorDone // it never runs user code: it stops at once

	// If work is left, workers and blocking goroutines finish their current
	// task and return, abandoning the rest of a turn with its mailbox.
	// Neither can be interrupted inside user code, so wait for them only as
	// long as ctx allows, or a moment when it is over already: those
	// outside user code return at once.
	wctx := ctx
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
	}
	_ = e.changed.Wait(wctx, func() bool { return e.live.Load() == 0 && e.blocking.live() == 0 })
	var stuck []string
	if n := e.live.Load(); n > 0 {
		stuck = append(stuck, fmt.Sprintf("%d workers still in a task", n))
	}
	if n := e.blocking.live(); n > 0 {
		stuck = append(stuck, fmt.Sprintf("%d blocking goroutines still in a task", n))
	}
	if abandoned > 0 || len(stuck) > 0 {
		return fmt.Errorf("closing executor: %w: %d mailboxes abandoned %v", context.Cause(ctx), abandoned, stuck)
	}
	return nil
}
