package executor

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/wowd/wowd/internal/ring"
)

// parked in a worker's inbox means: empty, and the worker is parked. The push
// that replaces it wakes the worker.
var parked = new(mailbox)

// worker runs mailbox turns. Its queue is, oldest first: its run queue
// (filled by the worker only, taken from by anyone with a CAS, like the Go
// scheduler's per-P queue), its spill (what did not fit in the run queue),
// and its inbox, a stack that placement pushes onto with one CAS and that the
// worker, or a thief, takes whole with another and reverses.
type worker struct {
	// Line 0: the owner's, written every turn.
	//
	// turnSeq counts turn starts and ends: odd while a turn runs. Reading
	// it twice, some time apart, tells a long turn without the worker
	// reading the clock (see turnAge).
	turnSeq   atomic.Uint64
	turnCount uint64 // owner's copy of turnSeq
	// Counts of the worker's own turns, owner only, published to the
	// atomics below every 64 turns, whenever it parks and as it returns
	// (see Stats).
	local struct{ succeeded, failed, emptied, turns uint64 }
	ex    *Executor
	_     [8]byte

	// Line 1: where placement and the worker meet, once per activation.
	inbox    atomic.Pointer[mailbox] // newest first, linked by mailbox.next; parked while the worker is
	watching atomic.Bool             // parked with a timeout, watching for long turns
	stuck    atomic.Bool             // set by a watcher when the current turn runs long; cleared as a turn starts or ends
	spillN   atomic.Int32            // len(spill), read by thieves
	_        [44]byte

	// Lines 2-3: used now and then.
	id        int
	wake      chan struct{}
	obsMu     sync.Mutex    // guards obsTurn and obsAt
	obsTurn   uint64        // the value of turnSeq when first observed
	obsAt     time.Time     // when obsTurn was first observed
	succeeded atomic.Uint64 // tasks this worker's turns finished successfully
	failed    atomic.Uint64 // tasks this worker's turns finished with a failure
	emptied   atomic.Uint64 // mailboxes this worker's turns emptied
	requeued  atomic.Uint64 // mailboxes put back at the end of a full turn
	wakeups   atomic.Uint64 // times the worker was woken from parking
	spillMu   sync.Mutex    // guards spill
	spill     ring.Ring[*mailbox]
	_         [48]byte

	rq runq
}

// place puts a runnable mailbox on a worker: a running worker with an empty
// inbox that is not stuck in a long turn, else a parked worker (woken), else
// a worker not stuck, counting from one chosen by the mailbox's hash. Idle
// workers even out the rest by stealing.
func (e *Executor) place(mb *mailbox) {
	if e.stopping.Load() {
		return // Close gave up on remaining work; the mailbox is abandoned
	}
	ws := e.workers
	n := len(ws)
	start := int((mb.hash >> 32) % uint64(n))
	var sleeper, free, open, anyw *worker
	for i := range n {
		w := ws[(start+i)%n]
		top := w.inbox.Load()
		if top == parked {
			if sleeper == nil {
				sleeper = w
			}
			continue
		}
		if anyw == nil {
			anyw = w
		}
		if w.stuck.Load() {
			continue
		}
		if top == nil && free == nil {
			free = w
		} else if open == nil {
			open = w
		}
	}
	switch {
	case free != nil:
		free.push(mb)
		if sleeper != nil && !sleeper.watching.Load() {
			// Nobody would notice if free's turn ran long from now on:
			// have the parked worker watch (park with a timeout).
			sleeper.nudge()
		}
	case sleeper != nil:
		sleeper.push(mb)
	case open != nil:
		open.push(mb)
	default: // every running worker is stuck in a long turn
		anyw.push(mb)
	}
}

// placeAll places mailboxes activated together: a share for each worker not
// stuck in a long turn, parked ones included (woken once), one CAS each.
func (e *Executor) placeAll(mbs []*mailbox) {
	switch {
	case len(mbs) == 0:
		return
	case len(mbs) == 1:
		e.place(mbs[0])
		return
	}
	if e.stopping.Load() {
		return
	}
	var targets [64]*worker
	ts := targets[:0]
	for _, w := range e.workers {
		// A parked worker is in no turn, whatever its mark says (a mark
		// can outlive the turn it was set for: see watchOthers).
		if (w.inbox.Load() == parked || !w.stuck.Load()) && len(ts) < cap(targets) {
			ts = append(ts, w)
		}
	}
	if len(ts) == 0 {
		for _, mb := range mbs {
			e.place(mb)
		}
		return
	}
	per := (len(mbs) + len(ts) - 1) / len(ts)
	for i, w := range ts {
		lo := i * per
		if lo >= len(mbs) {
			break
		}
		w.pushAll(mbs[lo:min(lo+per, len(mbs))])
	}
}

// push puts mb on w's inbox, waking w if it is parked. The caller owns mb
// and lets go of it with the push.
func (w *worker) push(mb *mailbox) { w.pushChain(mb, mb) }

// pushAll puts mbs, oldest first, on w's inbox with one CAS.
func (w *worker) pushAll(mbs []*mailbox) {
	for i := 1; i < len(mbs); i++ {
		mbs[i].next = mbs[i-1]
	}
	w.pushChain(mbs[0], mbs[len(mbs)-1])
}

// pushChain puts the mailboxes linked from top down to bottom by next on
// w's inbox, waking w if it is parked.
func (w *worker) pushChain(bottom, top *mailbox) {
	for {
		old := w.inbox.Load()
		if old == parked {
			bottom.next = nil
		} else {
			bottom.next = old
		}
		if w.inbox.CompareAndSwap(old, top) {
			if old == parked {
				w.nudge()
			}
			return
		}
	}
}

// grab takes w's whole inbox and returns it oldest first, linked by next,
// or nil. It never takes the parked mark.
func (w *worker) grab() *mailbox {
	for {
		top := w.inbox.Load()
		if top == nil || top == parked {
			return nil
		}
		if w.inbox.CompareAndSwap(top, nil) {
			var prev *mailbox
			for top != nil {
				next := top.next
				top.next = prev
				prev, top = top, next
			}
			return prev
		}
	}
}

// adopt queues a list of mailboxes, oldest first, on w: its run queue, then
// its spill. Owner only.
func (w *worker) adopt(list *mailbox) {
	for list != nil {
		mb := list
		list, mb.next = mb.next, nil
		if w.rq.put(mb) {
			continue
		}
		w.spillMu.Lock()
		for mb != nil {
			w.spill.Push(mb)
			mb = list
			if list != nil {
				list, mb.next = list.next, nil
			}
		}
		w.spillN.Store(int32(w.spill.Len()))
		w.spillMu.Unlock()
	}
}

// takeSpilled moves spilled mailboxes into the run queue. Owner only.
func (w *worker) takeSpilled() {
	w.spillMu.Lock()
	for w.spill.Len() > 0 && w.rq.put(*w.spill.At(0)) {
		w.spill.Pop()
	}
	w.spillN.Store(int32(w.spill.Len()))
	w.spillMu.Unlock()
}

// flush publishes the worker's counts. Owner only.
func (w *worker) flush() {
	store := func(a *atomic.Uint64, v uint64) {
		if a.Load() != v {
			a.Store(v)
		}
	}
	store(&w.succeeded, w.local.succeeded)
	store(&w.failed, w.local.failed)
	if w.emptied.Load() != w.local.emptied {
		w.emptied.Store(w.local.emptied)
		w.ex.changed.Notify() // Close waits for mailboxes to go idle: see settle
	}
}

// nudge wakes a parked worker, with or without work for it.
func (w *worker) nudge() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// next takes the worker's next mailbox: from its run queue, refilled from
// its spill, then its inbox, when dry. Owner only.
func (w *worker) next() *mailbox {
	if mb := w.rq.get(); mb != nil {
		return mb
	}
	if w.spillN.Load() > 0 {
		w.takeSpilled()
		if mb := w.rq.get(); mb != nil {
			return mb
		}
	}
	return w.run(w.grab())
}

// run returns the first of a list of mailboxes, oldest first, for w to run
// now and queues the rest on w.
func (w *worker) run(list *mailbox) *mailbox {
	if list == nil {
		return nil
	}
	rest := list.next
	list.next = nil
	w.adopt(rest)
	return list
}

// take removes the oldest mailbox waiting for v, for thief; whatever else
// was in v's inbox moves to thief.
func (v *worker) take(thief *worker) *mailbox {
	if mb := v.rq.get(); mb != nil {
		return mb
	}
	if v.spillN.Load() > 0 {
		v.spillMu.Lock()
		mb, _ := v.spill.Pop()
		v.spillN.Store(int32(v.spill.Len()))
		v.spillMu.Unlock()
		if mb != nil {
			return mb
		}
	}
	return thief.run(v.grab())
}

// steal takes the oldest queued mailbox of another worker.
func (w *worker) steal() *mailbox {
	ws := w.ex.workers
	n := len(ws)
	for i := 1; i < n; i++ {
		if mb := ws[(w.id+i)%n].take(w); mb != nil {
			return mb
		}
	}
	return nil
}

func (w *worker) loop() {
	defer func() {
		w.flush() // what the last turns counted, for Stats after Close
		w.ex.live.Add(-1)
		w.ex.changed.Notify()
	}()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	const maxWatch = time.Millisecond
	backoff := longTurn
	for {
		// Before taking a mailbox: once Close stopped waiting, what is
		// queued is abandoned (see Executor.stopping).
		if w.ex.stopping.Load() {
			return
		}
		mb := w.next()
		if mb == nil {
			mb = w.steal()
		}
		if mb != nil {
			backoff = longTurn
			w.turn(mb)
			continue
		}
		w.flush()
		if w.rq.len() > 0 || w.spillN.Load() > 0 {
			continue // what thieves left: only this worker adds to either
		}
		// While another worker is in a turn, park with a timeout: a mailbox
		// queued behind that turn must not wait for it if it runs long.
		var timeout <-chan time.Time
		watch := w.watchOthers()
		if watch {
			if timer == nil {
				timer = time.NewTimer(backoff)
			} else {
				timer.Reset(backoff)
			}
			timeout = timer.C
			backoff = min(2*backoff, maxWatch)
			w.watching.Store(true)
		} else {
			backoff = longTurn
		}
		// Park only with an empty inbox: a push either lands first (the CAS
		// fails and we run it) or finds the mark and wakes us.
		if w.inbox.CompareAndSwap(nil, parked) {
			select {
			case <-w.wake:
				w.wakeups.Add(1)
			case <-timeout:
			case <-w.ex.stopCh:
			}
			w.inbox.CompareAndSwap(parked, nil) // unless a push replaced it
		}
		if watch {
			w.watching.Store(false)
		}
	}
}

// watchOthers marks workers whose turn has run long as stuck, so placement
// avoids them (a mark set as the turn ends outlives it until the worker's
// next turn: placement takes parked workers whatever their mark), and reports whether another worker is in a turn: only then
// can a mailbox get stuck behind a long turn.
func (w *worker) watchOthers() (busy bool) {
	var now time.Time
	for _, o := range w.ex.workers {
		if o == w || o.turnSeq.Load()&1 == 0 {
			continue
		}
		busy = true
		if now.IsZero() {
			now = time.Now()
		}
		if o.turnAge(now) >= longTurn && !o.stuck.Load() {
			o.stuck.Store(true)
		}
	}
	return busy
}

// turnAge returns how long w's current turn has been seen running: 0 the
// first time a turn is observed, then the time since. Idle workers observe
// every 100 µs to 1 ms while another is in a turn, so a long turn is
// recognized within about that; Stats observes too.
func (w *worker) turnAge(now time.Time) time.Duration {
	t := w.turnSeq.Load()
	if t&1 == 0 {
		return 0
	}
	w.obsMu.Lock()
	defer w.obsMu.Unlock()
	if w.obsTurn != t {
		w.obsTurn, w.obsAt = t, now
		return 0
	}
	return now.Sub(w.obsAt)
}

// turn runs up to throughput tasks of mb, which w owns.
func (w *worker) turn(mb *mailbox) {
	e := w.ex
	w.turnCount++
	w.turnSeq.Store(w.turnCount) // odd: in a turn
	if w.stuck.Load() {
		w.stuck.Store(false)
	}
	var done, failed, finished int64 // finished: not yet taken off mb.pending
	for n := 0; ; {
		if mb.head == nil && int(mb.li) == len(mb.local) {
			if !e.settle(mb, finished) {
				w.local.emptied++
				break // emptied and let go
			}
			finished = 0
		}
		if n == e.throughput {
			mb.pending.Add(-finished) // tasks remain: cannot empty it
			w.requeued.Add(1)
			w.push(mb) // back of the queue: fair to the other mailboxes
			break
		}
		if e.stopping.Load() {
			// Close stopped waiting. It waits for the work to drain first,
			// so a turn with tasks left is work it gave up on: start no
			// further task. The mailbox is abandoned holding its tasks, as
			// Close counted it.
			mb.pending.Add(-finished) // tasks remain: cannot empty it
			break
		}
		var t Task
		if t = mb.head; t != nil {
			mb.head = nil
		} else {
			t = mb.local[mb.li]
			mb.local[mb.li] = nil
			mb.li++
		}
		n++
		if mb.blocking() {
			mb.pending.Add(-finished) // t is still pending: cannot empty it
			e.blocking.submit(t, mb)
			break
		}
		switch t.Run(Resume{mb, e, false}) {
		case Done:
			done++
			finished++
			continue
		case Failed:
			failed++
			finished++
			continue
		}
		// t returned Pending. Account for the tasks finished so far before
		// letting go: once released, its completion may own the mailbox and
		// settle it at once. (t is still counted: this cannot empty it.)
		if finished > 0 {
			mb.pending.Add(-finished)
			finished = 0
		}
		waiting, f := mb.released()
		if waiting {
			if testHookReleased != nil {
				testHookReleased()
			}
			break
		}
		if f {
			failed++
		} else {
			done++
		}
		finished++
	}
	w.turnCount++
	w.turnSeq.Store(w.turnCount) // even: between turns
	if w.stuck.Load() {
		w.stuck.Store(false) // the long turn ended; a parked worker must not look stuck
	}
	w.local.succeeded += uint64(done)
	w.local.failed += uint64(failed)
	if w.local.turns++; w.local.turns%64 == 0 {
		w.flush()
	}
}
