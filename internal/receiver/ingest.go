package receiver

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/internal/metrics"
)

// ErrStopping is returned by Admit once the receiver stopped admitting.
var ErrStopping = errors.New("receiver stopping: not admitting")

// Dispatcher returns the name of the receiver's dispatcher.
func (r *Receiver) Dispatcher() string { return r.o.Dispatcher }

// Routes reports whether the receiver consumes topic.
func (r *Receiver) Routes(topic string) bool { return r.routes[topic] != nil }

// Admitted is a record admitted through Admit, on its way through its
// mailbox.
type Admitted struct {
	w *localWait
	r *Receiver
	// topic and key are the record's: its aggregate is held while its
	// copy waits for its partition's owner (localhold.go).
	topic, key string
}

// Published tells the receiver where the record's copy was published,
// once Done is closed: if the receiver gave the record up, the owner of
// that partition handles the copy, and until it is known finished, the
// aggregate's later local records are given up here too, so that they do
// not run ahead of it.
func (a Admitted) Published(partition int32, offset int64) {
	if !a.Finished() {
		a.r.published(a.topic, a.key, partition, offset)
	}
}

// NotPublished tells the receiver that the record's copy was not published
// (the publish failed), once Done is closed: nothing is to wait for.
func (a Admitted) NotPublished() {
	if !a.Finished() {
		a.r.notPublished(a.topic, a.key)
	}
}

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
// the caller. The job calls exactly one of finished and dropped, once.
type localWait struct {
	done chan struct{}
	// Written before done is closed:
	ok      bool            // finished, not given up
	outcome metrics.Outcome // what became of it; Dropped when given up
	fail    failure         // a redriven message that failed for good again: why (outcome Parked)
}

func (w *localWait) finished(o metrics.Outcome) { w.ok, w.outcome = true, o; close(w.done) }
func (w *localWait) dropped()                   { w.outcome = metrics.Dropped; close(w.done) }

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
	route := r.routes[rec.Topic]
	if route == nil {
		return Admitted{}, errors.New("receiver does not consume " + rec.Topic)
	}
	if len(rec.Key) == 0 {
		return Admitted{}, errors.New("record has no key (the aggregate ID)")
	}
	// Take a slot of the window, waiting for one to free up.
	admitted := false
	err := r.changed.Wait(ctx, func() bool {
		for !r.stopping.Load() {
			n := r.inFlight.Load()
			if n >= r.window {
				return false
			}
			if r.inFlight.CompareAndSwap(n, n+1) {
				admitted = true
				return true
			}
		}
		return true
	})
	switch {
	case err != nil:
		return Admitted{}, context.Cause(ctx)
	case !admitted:
		return Admitted{}, ErrStopping
	}
	p := r.local
	p.pending.Add(1)
	w := &localWait{done: make(chan struct{})}
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
	a := Admitted{w: w, r: r, topic: rec.Topic, key: string(rec.Key)} // j may be done and reused once submitted
	if err := route.Group.Submit(j.msg.AggregateID, j); err != nil {
		j.drop()
		r.notPublished(a.topic, a.key) // refused: nothing is published for it
		return Admitted{}, ErrStopping
	}
	return a, nil
}
