package receiver

import (
	"context"
	"errors"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/internal/metrics"
)

// ErrStopping is returned by Admit once the receiver stopped admitting.
var ErrStopping = errors.New("receiver stopping: not admitting")

// Dispatcher returns the name of the receiver's dispatcher.
func (r *Receiver) Dispatcher() string { return r.o.Dispatcher }

// Context is the bounded context the receiver reads.
func (r *Receiver) Context() string { return r.o.Context }

// Routes reports whether the receiver consumes topic.
func (r *Receiver) Routes(topic string) bool { return r.routes[topic] != nil }

// Admitted is a record admitted through Admit, on its way through its
// mailbox.
type Admitted struct {
	w *localWait
	r *Receiver
}

// Published tells the receiver where the record's copy was published: if
// the receiver gave the record up (before this call or after it), the
// owner of that partition handles the copy, and until it is known
// finished, the aggregate's later local records are given up here too, so
// that they do not run ahead of it. Only the first of Published and
// NotPublished counts.
func (a Admitted) Published(partition int32, offset int64) { a.w.report(a.r, true, partition, offset) }

// NotPublished tells the receiver that the record's copy was not published
// (the publish failed): nothing is to wait for, whether the record was
// given up before this call or is given up after it.
func (a Admitted) NotPublished() { a.w.report(a.r, false, 0, 0) }

// Done is closed once the record is finished (handled, or skipped by a
// filter or the handler) or given up: the receiver stopped before it
// finished, its handler failed for good, or it must go through the owner
// of its partition (see Published).
func (a Admitted) Done() <-chan struct{} { return a.w.done }

// Finished reports, once Done is closed, whether the record was finished
// rather than given up.
func (a Admitted) Finished() bool {
	select {
	case <-a.w.done:
		return a.w.ok
	default:
		return false
	}
}

// localWait is shared by an admitted record's job and the Admitted handed to
// the caller. The job calls exactly one of finished and dropped, once; for
// a record of the local partition, giveUp before dropped.
type localWait struct {
	done chan struct{}
	// Written before done is closed:
	ok      bool            // finished, not given up
	outcome metrics.Outcome // what became of it; Dropped when given up
	fail    failure         // a redriven message that failed for good again: why (outcome Parked)

	topic, key string // fixed: the aggregate held while its copy waits (localhold.go)

	// mu orders the job's give-up against the ingest's report of the copy,
	// which may come first: the ingest stops waiting for Done when it
	// drains, and reports that nothing was published when it panics on
	// the way. Either order leaves the holds as the other would, so that a
	// report is never counted against another message's give-up. Lock
	// order: localWait.mu before localHolds.mu.
	mu        sync.Mutex
	held      bool // given up and counted (gaveUp); the report not made yet
	reported  bool // the report was made: published, at partition and offset, or not
	published bool
	partition int32
	offset    int64
}

func newLocalWait(topic, key string) *localWait {
	return &localWait{done: make(chan struct{}), topic: topic, key: key}
}

func (w *localWait) finished(o metrics.Outcome) { w.ok, w.outcome = true, o; close(w.done) }
func (w *localWait) dropped()                   { w.outcome = metrics.Dropped; close(w.done) }

// giveUp holds the aggregate of a local record given up here: its copy
// goes to the owner of its partition, and the aggregate's later local
// records must not run ahead of it. Until the report; or, if the copy was
// already reported published, until it is finished; not at all if it was
// reported not published.
func (w *localWait) giveUp(r *Receiver) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case !w.reported:
		r.gaveUp(w.topic, w.key)
		w.held = true
	case w.published:
		r.gaveUp(w.topic, w.key)
		r.published(w.topic, w.key, w.partition, w.offset)
	}
}

// report is the ingest's word on the copy, once: it settles the hold of a
// give-up already counted, and tells a later give-up what to do. A record
// finished here needs nothing.
func (w *localWait) report(r *Receiver, published bool, partition int32, offset int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.reported {
		return
	}
	w.reported, w.published, w.partition, w.offset = true, published, partition, offset
	if !w.held {
		return
	}
	w.held = false
	if published {
		r.published(w.topic, w.key, partition, offset)
	} else {
		r.notPublished(w.topic, w.key)
	}
}

// Admit hands the receiver a record that did not come from Kafka (the
// local-first ingest): it waits until the window has room (that is the
// caller's backpressure) or ctx is done, then queues the record in its
// aggregate's mailbox like a fetched one, and returns. The returned
// Admitted tells when the record is finished. Such records belong to no
// partition: nothing is committed for them, and a copy published to Kafka
// as handled by this receiver's dispatcher (see HeaderHandledBy) is
// acknowledged without handling when it comes back; the caller must list a
// dispatcher in the mark only once its receiver finished the record.
func (r *Receiver) Admit(ctx context.Context, rec *kgo.Record) (Admitted, error) {
	if !r.o.Ingest {
		return Admitted{}, errors.New("receiver takes no ingested records (Options.Ingest)")
	}
	route := r.routes[rec.Topic]
	if route == nil {
		return Admitted{}, errors.New("receiver does not consume " + rec.Topic)
	}
	if len(rec.Key) == 0 {
		return Admitted{}, errors.New("record has no key (the aggregate ID)")
	}
	// Take a slot of the window, waiting for one to free up; while the
	// poll loop waits for room for its records, only a slot it granted (a
	// steady stream of admissions would otherwise take every slot as it
	// freed, and no record would be fetched while it lasted; see
	// Receiver.pollWaits).
	admitted, waiting := false, false
	wait := func() bool {
		if !waiting {
			waiting = true
			r.admitWaiting.Add(1) // the poll loop leaves room for it (leaveRoom)
		}
		return false
	}
	err := r.changed.Wait(ctx, func() bool {
		for !r.stopping.Load() {
			n := r.inFlight.Load()
			if n >= r.window {
				return wait()
			}
			if r.pollWaits.Load() {
				// The poll loop waits for room for its records: only a
				// slot it granted, so that the two share what frees up.
				g := r.grants.Load()
				if g <= 0 {
					return wait()
				}
				if !r.grants.CompareAndSwap(g, g-1) {
					continue
				}
				if r.inFlight.CompareAndSwap(n, n+1) {
					admitted = true
					return true
				}
				r.grants.Add(1)
				continue
			}
			if r.inFlight.CompareAndSwap(n, n+1) {
				admitted = true
				return true
			}
		}
		return true
	})
	if waiting {
		r.admitWaiting.Add(-1)
	}
	switch {
	case err != nil:
		return Admitted{}, context.Cause(ctx)
	case !admitted:
		return Admitted{}, ErrStopping
	}
	p := r.local
	p.pending.Add(1)
	w := newLocalWait(rec.Topic, string(rec.Key))
	p.mu.Lock()
	if p.closed.Load() {
		p.mu.Unlock()
		r.lower(p)
		r.release()
		return Admitted{}, ErrStopping
	}
	j := newJob(r, p, rec, p.tr.nextSeq())
	p.tr.push(0, 0, j)
	j.route, j.kind = route, route.Kind
	j.msg.Context, j.msg.Aggregate, j.msg.Kind = route.Context, route.Aggregate, route.Kind
	j.local = w
	p.mu.Unlock()
	a := Admitted{w: w, r: r} // j may be done and reused once submitted
	if err := route.Group.Submit(j.msg.AggregateID, j); err != nil {
		j.drop()
		a.NotPublished() // refused: nothing is published for it
		return Admitted{}, ErrStopping
	}
	return a, nil
}
