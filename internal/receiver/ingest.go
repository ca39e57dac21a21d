package receiver

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrStopping is returned by Admit once the receiver stopped admitting.
var ErrStopping = errors.New("receiver stopping: not admitting")

// Routes reports whether the receiver consumes topic.
func (r *Receiver) Routes(topic string) bool { return r.routes[topic] != nil }

// Admit hands the receiver a record that did not come from Kafka (the
// local-first ingest): it waits until the window has room (that is the
// caller's backpressure) or ctx is done, then queues the record in its
// aggregate's mailbox like a fetched one. It returns once the record is
// admitted, not handled. Such records belong to no partition: nothing is
// committed for them, and their copy published to Kafka is acknowledged
// without handling when it comes back (see HeaderHandledBy).
func (r *Receiver) Admit(ctx context.Context, rec *kgo.Record) error {
	route := r.routes[rec.Topic]
	if route == nil {
		return errors.New("receiver does not consume " + rec.Topic)
	}
	if len(rec.Key) == 0 {
		return errors.New("record has no key (the aggregate ID)")
	}
	for {
		if r.stopping.Load() {
			return ErrStopping
		}
		n := r.inFlight.Load()
		if n < r.window && r.inFlight.CompareAndSwap(n, n+1) {
			break
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(time.Millisecond):
		}
	}
	p := r.local
	p.mu.Lock()
	seq := p.tr.push(0, 0)
	p.mu.Unlock()
	p.pending.Add(1)
	j := newJob(r, p, rec, seq)
	j.route, j.kind = route, route.Kind
	j.msg.Context, j.msg.Aggregate, j.msg.Kind = route.Context, route.Aggregate, route.Kind
	j.local = true
	if err := route.Group.Submit(j.msg.AggregateID, j); err != nil {
		j.drop()
		return ErrStopping
	}
	return nil
}
