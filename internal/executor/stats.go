package executor

import "time"

// Stats are cheap to read counters and gauges of an executor.
//
// Mailboxes, Completed and Failed lag behind the workers: a worker publishes
// what its turns did (mailboxes emptied, tasks finished) every 64 turns and
// whenever it runs out of work, not at every turn, which would cost the hot
// path a fenced store or two per turn. So a busy worker's last turns, up to
// 63 of them, still count as holding tasks and not finished: turns of
// microseconds publish within a millisecond, but a worker stuck in a long
// task publishes its last turns only when the task ends. What finishes away
// from a worker turn (a Pending task completed after its turn let go, a
// task on the blocking pool) counts at once. When the workers are idle, and
// once they have returned after Close, the figures are exact.
type Stats struct {
	Workers         int
	Mailboxes       int64 // mailboxes holding tasks (lags: see above)
	QueuedMailboxes int64 // mailboxes waiting in a worker's queue for their turn
	Submitted       uint64
	Completed       uint64        // tasks finished successfully (lags: see above)
	Failed          uint64        // tasks finished with a failure (lags: see above)
	BlockingRunning int64         // tasks running on the blocking pool
	Wakeups         uint64        // times a parked worker was woken (a costly path: a few µs each)
	LongestTurn     time.Duration // age of the oldest turn now running, since first observed (by an earlier Stats or an idle worker)
}

// Stats returns the current figures. It takes each shard lock briefly; call
// it at scrape frequency, not per message.
func (e *Executor) Stats() Stats {
	s := Stats{Workers: len(e.workers)}
	now := time.Now()
	for _, w := range e.workers {
		s.Mailboxes -= int64(w.emptied.Load())
		// Every placement leads to one turn: what was placed and has not
		// started its turn is queued.
		s.QueuedMailboxes += int64(w.requeued.Load()) - int64(w.turnSeq.Load()+1)/2
		// Each published by itself: a difference of two loads could go
		// backwards (or wrap) between scrapes.
		s.Completed += w.succeeded.Load()
		s.Failed += w.failed.Load()
		s.LongestTurn = max(s.LongestTurn, w.turnAge(now))
		s.Wakeups += w.wakeups.Load()
	}
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		s.Mailboxes += int64(sh.activated - sh.emptied.Load())
		s.QueuedMailboxes += int64(sh.activated + sh.resumed.Load())
		s.Submitted += sh.submitted
		sh.mu.Unlock()
		s.Completed += sh.asyncCompleted.Load()
		s.Failed += sh.asyncFailed.Load()
	}
	s.QueuedMailboxes = max(s.QueuedMailboxes, 0) // counts published at different times
	s.BlockingRunning = e.blocking.running.Load()
	return s
}

// Backlog is the number of tasks waiting for one key.
type Backlog struct {
	Group uint32
	Key   string
	Tasks int
}

// ID returns the group's identifier, as reported in Backlog.
func (g *Group) ID() uint32 { return g.id }

// TopBacklogs returns up to n keys of the groups with the most tasks waiting
// to start, largest first: a mailbox's unfinished tasks but the one running
// (or next to run). While a turn runs, the tasks it finished already are
// counted until it settles them: up to throughput-1 more than wait. The
// groups must share an executor. It locks each shard in turn; call it at
// scrape frequency, not per message. (Counting only the tasks submitted
// since the owner last took them in read 0 for a hot key whose queue its
// running turn had taken over.)
func TopBacklogs(n int, groups ...*Group) []Backlog {
	if n <= 0 || len(groups) == 0 {
		return nil
	}
	e := groups[0].ex
	wanted := make(map[uint32]bool, len(groups))
	for _, g := range groups {
		wanted[g.id] = true
	}
	var top []Backlog
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		sh.m.each(func(mb *mailbox) {
			d := int(mb.pending.Load()) - 1 // idle mailboxes have none
			if d <= 0 || !wanted[mb.group] || (len(top) == n && d <= top[n-1].Tasks) {
				return
			}
			b := Backlog{Group: mb.group, Key: mb.id, Tasks: d}
			j := len(top)
			if j < n {
				top = append(top, b)
			} else {
				j = n - 1
			}
			for ; j > 0 && top[j-1].Tasks < d; j-- {
				top[j] = top[j-1]
			}
			top[j] = b
		})
		sh.mu.Unlock()
	}
	return top
}
