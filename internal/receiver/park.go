package receiver

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/wowd/wowd/internal/executor"
	"github.com/wowd/wowd/internal/metrics"
	"github.com/wowd/wowd/internal/park"
)

// Parking (Options.Park): a message that failed for good parks its
// aggregate instead of going to the dead-letter topic. It is written to the
// parked topic of its source (park.Topic), the aggregate's state to the
// dispatcher's state topic (park.StateTopic), and only then is the message
// finished, so the partition's commit moves past it and the other
// aggregates go on. Every later message of the aggregate is written to the
// parked topic behind it, in order (the aggregate's mailbox runs them one at
// a time), until an operator's request, read from the state topic, redrives,
// skips or discards the parked messages: a task in the aggregate's mailbox,
// so that the aggregate's new arrivals wait behind it and find it unparked
// once its parked messages are handled.
//
// Who knows what: the receiver keeps the parked aggregates of the
// partitions it owns (parked). A tail of the state topic (park.Tail) runs
// for the receiver's life; a newly assigned partition is paused until the
// tail has read the whole topic (pauseLoading), then its parked aggregates
// are loaded, so no message of it is handled before the receiver knows
// which of its aggregates are parked. The partition's owner is the only
// writer of its aggregates' parked messages and state, and acts on
// requests only for aggregates it owns.

// Parking configures parking (Options.Park).
type Parking struct {
	// StateTopic is the dispatcher's state topic (park.StateTopic).
	StateTopic string
	// Max bounds the aggregates the receiver keeps parked: past it, a
	// failed message waits, and fetching pauses, until one is unparked.
	Max int
	// ClientOpts connect the clients that read the parking topics (the
	// tail, redrives): like Options.ClientOpts but without hooks that may
	// be installed on one client only (metrics registration). Nil:
	// Options.ClientOpts.
	ClientOpts []kgo.Opt
}

// parkClientOpts returns the options of parking's own clients.
func (r *Receiver) parkClientOpts() []kgo.Opt {
	if r.o.Park.ClientOpts != nil {
		return r.o.Park.ClientOpts
	}
	return r.o.ClientOpts
}

// parkKey names an aggregate of a source topic.
type parkKey struct {
	topic, key string
}

// parkedAgg is a parked aggregate of an owned partition.
type parkedAgg struct {
	state park.State // state.Request is nil: requests are acted on, not kept
	busy  bool       // an action (redrive, skip, discard) is under way
}

// parkState is the receiver's parking state; nil without Options.Park.
type parkState struct {
	mu sync.RWMutex // guards parked and seen. A leaf: no other lock is taken under it.
	// parked are the parked aggregates of the owned partitions.
	parked map[parkKey]*parkedAgg
	// seen is the state topic as the tail read it, this dispatcher's
	// aggregates by key: where a newly assigned partition's parked
	// aggregates are loaded from.
	seen map[string]*park.State

	tail     *park.Tail
	tailStop context.CancelFunc
	tailDone chan struct{}
	wg       sync.WaitGroup // loads and actions
}

// parked reports the parked aggregate of topic and key, if any. Cheap when
// nothing is parked: one atomic load.
func (r *Receiver) parkedAgg(topic, key string) (park.State, bool) {
	ps := r.park
	if ps == nil || r.nparked.Load() == 0 {
		return park.State{}, false
	}
	ps.mu.RLock()
	a := ps.parked[parkKey{topic, key}]
	ps.mu.RUnlock()
	if a == nil {
		return park.State{}, false
	}
	return a.state, true
}

// newParking makes the tail of the state topic; New calls it before making
// the receiver's client, which may join the group (and be assigned
// partitions, which wait for the tail) before Start.
func (r *Receiver) newParking() error {
	ps := &parkState{parked: make(map[parkKey]*parkedAgg), seen: make(map[string]*park.State)}
	tail, err := park.NewTail(r.parkClientOpts(), r.o.Park.StateTopic, r.stateRead, func(err error) {
		r.log.Warn("reading the parked aggregates' state topic", zap.String("topic", r.o.Park.StateTopic), zap.Error(err))
	})
	if err != nil {
		return err
	}
	ps.tail = tail
	r.park = ps
	return nil
}

// startParking creates the parking topics and runs the tail of the state
// topic. Called by Start, before the poll loop.
func (r *Receiver) startParking() {
	ps := r.park
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	r.ensureParkingTopics(ctx)
	cancel()
	tail := ps.tail
	tctx, stop := context.WithCancel(context.Background())
	ps.tailStop, ps.tailDone = stop, make(chan struct{})
	go func() {
		defer close(ps.tailDone)
		tail.Run(tctx)
	}()
}

// stopParking waits, until ctx is done, for the loads and actions (their
// partitions are closed by now: they are ending), and stops the tail.
func (r *Receiver) stopParking(ctx context.Context) error {
	ps := r.park
	if ps == nil || ps.tailDone == nil {
		return nil
	}
	defer func() {
		ps.tailStop()
		<-ps.tailDone
	}()
	done := make(chan struct{})
	go func() {
		ps.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return errors.New("an action on a parked aggregate was still running at the shutdown deadline (its handler does not return): it is done again by the partition's next owner")
	}
}

// ensureParkingTopics creates the missing parked topics, each with its
// source's partition count (an aggregate's parked messages then land in the
// partition of its source's number), and the state topic, compacted. It only
// warns on failure: a write to a missing topic is retried until it exists.
func (r *Receiver) ensureParkingTopics(ctx context.Context) {
	adm := kadm.NewClient(r.cl)
	sources, err := adm.ListTopics(ctx, r.topics...)
	if err != nil {
		r.log.Warn("listing topics to create parking topics", zap.Error(err))
		return
	}
	create := func(topic string, partitions int32, configs map[string]*string) {
		resp, err := adm.CreateTopic(ctx, partitions, -1, configs, topic)
		switch {
		case err == nil && resp.Err == nil:
			r.log.Info("parking topic created", zap.String("topic", topic), zap.Int32("partitions", partitions))
		case errors.Is(err, kerr.TopicAlreadyExists) || errors.Is(resp.Err, kerr.TopicAlreadyExists):
		default:
			r.log.Warn("creating parking topic; writes to it are retried until it exists",
				zap.String("topic", topic), zap.Error(errors.Join(err, resp.Err)))
		}
	}
	compact := "compact"
	create(r.o.Park.StateTopic, 1, map[string]*string{"cleanup.policy": &compact})
	for _, src := range r.topics {
		if st, ok := sources[src]; ok && st.Err == nil {
			create(park.Topic(src), int32(len(st.Partitions)), nil)
		}
	}
}

// stateRead takes a record of the state topic from the tail: it keeps the
// dispatcher's aggregates, and starts the action an operator asked for on
// an aggregate parked in an owned partition.
func (r *Receiver) stateRead(key string, s *park.State) {
	ps := r.park
	var act *park.Request
	var k parkKey
	ps.mu.Lock()
	switch {
	case s == nil:
		delete(ps.seen, key)
	case s.Dispatcher != r.o.Dispatcher || r.routes[s.Topic] == nil:
	default:
		ps.seen[key] = s
		k = parkKey{s.Topic, s.Aggregate}
		if a := ps.parked[k]; a != nil && s.Request != nil && !a.busy {
			a.busy, act = true, s.Request
		}
	}
	ps.mu.Unlock()
	if act != nil {
		r.startAction(k, s.Partition, *act)
	}
}

// loadParked waits until the tail read the whole state topic, loads the
// parked aggregates of the newly assigned partition p, lifts its
// pauseLoading, and starts the actions asked for while no one owned them.
func (r *Receiver) loadParked(p *partition) {
	ps := r.park
	defer ps.wg.Done()
	select {
	case <-r.clientMade: // r.cl is set
	case <-p.ctx.Done():
		return
	}
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
		err := ps.tail.CaughtUp(ctx)
		cancel()
		if err == nil {
			break
		}
		if p.ctx.Err() != nil {
			return
		}
		wait := r.holdBackoff(attempt)
		r.log.Warn("reading the parked aggregates; the partition waits for them before handling anything",
			zap.String("topic", p.topic), zap.Int32("partition", p.partition), zap.String("state_topic", r.o.Park.StateTopic),
			zap.Duration("wait", wait), zap.Error(err))
		t := time.NewTimer(wait)
		select {
		case <-p.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
	type todo struct {
		k   parkKey
		req park.Request
	}
	var acts []todo
	ps.mu.Lock()
	for _, s := range ps.seen {
		if s.Topic != p.topic || s.Partition != p.partition {
			continue
		}
		st := *s
		st.Request = nil
		a := &parkedAgg{state: st}
		k := parkKey{s.Topic, s.Aggregate}
		ps.parked[k] = a
		if s.Request != nil {
			a.busy = true
			acts = append(acts, todo{k, *s.Request})
		}
	}
	r.nparked.Store(int32(len(ps.parked)))
	n := len(ps.parked)
	ps.mu.Unlock()
	p.mu.Lock()
	r.unpauseLocked(p, pauseLoading)
	p.mu.Unlock()
	r.log.Debug("parked aggregates loaded", zap.String("topic", p.topic), zap.Int32("partition", p.partition), zap.Int("parked", n))
	for _, a := range acts {
		r.startAction(a.k, p.partition, a.req)
	}
}

// assignedParking pauses the newly assigned partitions until their parked
// aggregates are loaded. Called by onAssigned, before the client fetches
// them, with the client (the first assignment may come before New has
// stored it in r.cl).
func (r *Receiver) assignedParking(cl *kgo.Client, ps []*partition) {
	if r.park == nil {
		return
	}
	for _, p := range ps {
		p.mu.Lock()
		if p.paused == 0 {
			cl.PauseFetchPartitions(map[string][]int32{p.topic: {p.partition}})
		}
		p.paused |= pauseLoading
		p.mu.Unlock()
		r.park.wg.Add(1)
		go r.loadParked(p)
	}
}

// unloadParked forgets the parked aggregates of partitions no longer owned:
// their next owner loads them from the state topic.
func (r *Receiver) unloadParked(gone []*partition) {
	ps := r.park
	if ps == nil || len(gone) == 0 {
		return
	}
	ps.mu.Lock()
	for k, a := range ps.parked {
		for _, p := range gone {
			if k.topic == p.topic && a.state.Partition == p.partition {
				delete(ps.parked, k)
			}
		}
	}
	r.nparked.Store(int32(len(ps.parked)))
	ps.mu.Unlock()
	r.parkRoom()
}

// reservePark takes one of the max-parked slots for an aggregate about to
// park, if one is free: parks of different aggregates run concurrently.
func (r *Receiver) reservePark() bool {
	if int(r.parkSlots.Add(1)+r.nparked.Load()) > r.o.Park.Max {
		r.parkSlots.Add(-1)
		return false
	}
	return true
}

// parkRoom lifts the max-parked pause once there is room again.
func (r *Receiver) parkRoom() {
	if r.park == nil || int(r.nparked.Load()+r.parkSlots.Load()) >= r.o.Park.Max {
		return
	}
	if r.parkFull.CompareAndSwap(true, false) {
		r.log.Info("parked aggregates below max-parked again: fetching resumes", zap.Int("max_parked", r.o.Park.Max))
		r.notify()
	}
}

// park writes the job's record to the parked topic and finishes it: the
// failed message that parks its aggregate (the aggregate's state is written
// too), or a later message of a parked aggregate. Write failures are retried
// with backoff while the partition is owned: the record is not finished
// before its write is acknowledged, so it holds its partition's commit but
// is never lost.
func (j *job) park() {
	r := j.r
	k := parkKey{j.rec.Topic, j.msg.AggregateID}
	head, parked := r.parkedAgg(k.topic, k.key)
	if !parked && !r.reservePark() {
		if r.parkFull.CompareAndSwap(false, true) {
			r.log.Warn("max-parked reached: the failed message waits, and fetching pauses, until an aggregate is unparked (wowd parked redrive|skip|discard)",
				zap.Int("max_parked", r.o.Park.Max), zap.String("topic", k.topic), zap.Int32("partition", j.rec.Partition),
				zap.Int64("offset", j.rec.Offset))
		}
		j.tries++
		j.after(r.holdBackoff(j.tries), j.park)
		return
	}
	f := j.failure
	since := time.Now()
	if parked {
		f = failure{class: "parked", reason: "its aggregate is parked: " + head.Reason}
		since = head.Since
	}
	src := j.rec
	hs := make([]kgo.RecordHeader, 0, len(src.Headers)+8)
	hs = append(hs, src.Headers...)
	hs = append(hs,
		kgo.RecordHeader{Key: park.HeaderDispatcher, Value: []byte(r.o.Dispatcher)},
		kgo.RecordHeader{Key: park.HeaderReason, Value: []byte(truncate(f.reason, maxErrorHeader))},
		kgo.RecordHeader{Key: park.HeaderClass, Value: []byte(f.class)},
		kgo.RecordHeader{Key: park.HeaderAttempts, Value: []byte(strconv.Itoa(f.attempts))},
		kgo.RecordHeader{Key: park.HeaderSourceTopic, Value: []byte(src.Topic)},
		kgo.RecordHeader{Key: park.HeaderSourcePartition, Value: []byte(strconv.Itoa(int(src.Partition)))},
		kgo.RecordHeader{Key: park.HeaderSourceOffset, Value: []byte(strconv.FormatInt(src.Offset, 10))},
		kgo.RecordHeader{Key: park.HeaderSince, Value: []byte(since.UTC().Format("2006-01-02T15:04:05.000Z07:00"))},
	)
	rec := &kgo.Record{Topic: park.Topic(src.Topic), Key: src.Key, Value: src.Value, Headers: hs, Timestamp: src.Timestamp}
	r.cl.Produce(j.p.ctx, rec, func(w *kgo.Record, err error) {
		if err != nil && !parked {
			r.parkSlots.Add(-1) // park reserves again
		}
		switch {
		case err == nil && parked:
			j.finish(metrics.Parked)
		case err == nil:
			st := &park.State{
				Dispatcher: r.o.Dispatcher, Topic: src.Topic, Partition: src.Partition, Offset: src.Offset,
				Aggregate: k.key, Head: park.Position{Partition: w.Partition, Offset: w.Offset},
				Since: since, Class: f.class, Reason: truncate(f.reason, maxErrorHeader), Attempts: f.attempts,
			}
			j.tries = 0
			j.writeParked(st)
		case j.p.ctx.Err() != nil:
			j.abandon()
		default:
			j.tries++
			wait := r.holdBackoff(j.tries)
			r.log.Error("parked-topic write failed; retrying, the source offset stays uncommitted",
				zap.String("topic", src.Topic), zap.Int32("partition", src.Partition), zap.Int64("offset", src.Offset),
				zap.String("parked_topic", rec.Topic), zap.Int("attempt", j.tries), zap.Duration("wait", wait), zap.Error(err))
			j.after(wait, j.park)
		}
	})
}

// writeParked writes the state of the aggregate the job's record parked,
// then parks the aggregate and finishes the record.
func (j *job) writeParked(st *park.State) {
	r := j.r
	r.cl.Produce(j.p.ctx, stateRecord(r.o.Park.StateTopic, st), func(_ *kgo.Record, err error) {
		switch {
		case err == nil:
			ps := r.park
			ps.mu.Lock()
			ps.parked[parkKey{st.Topic, st.Aggregate}] = &parkedAgg{state: *st}
			r.nparked.Store(int32(len(ps.parked)))
			ps.mu.Unlock()
			r.parkSlots.Add(-1) // counted in nparked now
			r.m.ParkAction("park", "done")
			r.log.Warn("aggregate parked: this message failed for good; it and the aggregate's later messages wait in the parked topic for wowd parked redrive|skip|discard",
				zap.String("topic", st.Topic), zap.Int32("partition", st.Partition), zap.Int64("offset", st.Offset),
				zap.String("aggregate", st.Aggregate), zap.String("class", st.Class), zap.String("reason", st.Reason))
			j.finish(metrics.Parked)
		case j.p.ctx.Err() != nil:
			// The parked copy is written; the record comes again to the next
			// owner and is parked again: a duplicate in the parked topic,
			// never a loss.
			r.parkSlots.Add(-1)
			r.parkRoom()
			j.abandon()
		default:
			j.tries++
			wait := r.holdBackoff(j.tries)
			r.log.Error("parked-state write failed; retrying, the source offset stays uncommitted",
				zap.String("state_topic", r.o.Park.StateTopic), zap.Int("attempt", j.tries), zap.Duration("wait", wait), zap.Error(err))
			j.after(wait, func() { j.writeParked(st) })
		}
	})
}

func stateRecord(topic string, st *park.State) *kgo.Record {
	return &kgo.Record{Topic: topic, Key: []byte(st.Key()), Value: st.Marshal()}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// startAction queues an operator's action on a parked aggregate in its
// mailbox: it runs once the aggregate's earlier messages are done, and its
// later ones wait for it. The action counts as unfinished in its
// partition, so a revoke waits for it like for a record.
func (r *Receiver) startAction(k parkKey, partition int32, req park.Request) {
	r.partsMu.RLock()
	p := r.parts[tp{k.topic, partition}]
	r.partsMu.RUnlock()
	route := r.routes[k.topic]
	if p == nil || p.isClosed() || route == nil {
		r.parkIdle(k)
		return
	}
	t := &parkAction{r: r, p: p, k: k, req: req}
	p.pending.Add(1)
	r.park.wg.Add(1)
	if err := route.Group.Submit(k.key, t); err != nil {
		p.pending.Add(-1)
		r.park.wg.Done()
		r.changed.Notify()
		r.parkIdle(k)
	}
}

// parkIdle marks the aggregate's action over.
func (r *Receiver) parkIdle(k parkKey) {
	ps := r.park
	ps.mu.Lock()
	if a := ps.parked[k]; a != nil {
		a.busy = false
	}
	ps.mu.Unlock()
}

// parkAction is an operator's action on a parked aggregate, as a task of
// the aggregate's mailbox.
type parkAction struct {
	r   *Receiver
	p   *partition
	k   parkKey
	req park.Request
}

// Run implements executor.Task: the action runs on a goroutine of its own
// (it waits for Kafka and for the handler), the mailbox waits for it.
func (t *parkAction) Run(res executor.Resume) executor.Status {
	go func() {
		defer t.r.park.wg.Done()
		defer res.Complete(false)
		defer func() {
			t.p.pending.Add(-1)
			t.r.changed.Notify()
		}()
		t.run()
	}()
	return executor.Pending
}

func (t *parkAction) run() {
	r, p, k, req := t.r, t.p, t.k, t.req
	ps := r.park
	ps.mu.RLock()
	a := ps.parked[k]
	var st park.State
	if a != nil {
		st = a.state
	}
	ps.mu.RUnlock()
	at := []zap.Field{zap.String("action", req.Action), zap.String("by", req.By), zap.String("topic", k.topic),
		zap.Int32("partition", p.partition), zap.String("aggregate", k.key)}
	if a == nil || p.isClosed() {
		r.parkIdle(k)
		return
	}
	r.log.Info("parked aggregate: action starts", at...)
	recs, err := park.Parked(p.ctx, r.parkClientOpts(), kadm.NewClient(r.cl), &st)
	if err != nil {
		r.log.Error("parked aggregate: reading its parked messages; the aggregate stays parked, ask again", append(at, zap.Error(err))...)
		r.m.ParkAction(req.Action, "failed")
		r.parkIdle(k)
		return
	}
	rp := r.actionPartition(p)
	defer r.closePartition(rp)
	for i, rec := range recs {
		if req.Action == park.Discard || (req.Action == park.Skip && i == 0) {
			if err := r.produceDurably(p.ctx, r.parkedDeadLetter(rec)); err != nil {
				r.actionCanceled(k, req.Action, at)
				return
			}
			r.m.Count(metrics.DeadLettered, 1)
			continue
		}
		src, err := park.Source(rec)
		if err != nil {
			// Not written by wowd's parking: nothing to hand a handler.
			r.log.Error("parked aggregate: a parked record has no source; dead-lettering it", append(at, zap.Error(err))...)
			if err := r.produceDurably(p.ctx, r.parkedDeadLetter(rec)); err != nil {
				r.actionCanceled(k, req.Action, at)
				return
			}
			continue
		}
		o, f := r.runParked(rp, src)
		switch o {
		case metrics.Dropped:
			r.actionCanceled(k, req.Action, at)
			return
		case metrics.Parked:
			// Failed again: the aggregate stays parked, this message its head.
			st.Head = park.Position{Partition: rec.Partition, Offset: rec.Offset}
			st.Offset, st.Class, st.Reason, st.Attempts = src.Offset, f.class, truncate(f.reason, maxErrorHeader), f.attempts
			st.Request = nil
			if err := r.produceDurably(p.ctx, stateRecord(r.o.Park.StateTopic, &st)); err != nil {
				r.actionCanceled(k, req.Action, at)
				return
			}
			ps.mu.Lock()
			if a := ps.parked[k]; a != nil {
				a.state, a.busy = st, false
			}
			ps.mu.Unlock()
			r.m.ParkAction(req.Action, "failed")
			r.log.Warn("parked aggregate: a parked message failed again; the aggregate stays parked with it at the head",
				append(at, zap.Int64("offset", src.Offset), zap.String("class", f.class), zap.String("reason", f.reason))...)
			return
		}
	}
	// Every parked message is handled (or dead-lettered): unpark.
	tomb := &kgo.Record{Topic: r.o.Park.StateTopic, Key: []byte(park.Key(k.topic, k.key))}
	if err := r.produceDurably(p.ctx, tomb); err != nil {
		r.actionCanceled(k, req.Action, at)
		return
	}
	ps.mu.Lock()
	delete(ps.parked, k)
	r.nparked.Store(int32(len(ps.parked)))
	ps.mu.Unlock()
	r.parkRoom()
	r.m.ParkAction(req.Action, "done")
	r.log.Info("parked aggregate: unparked", append(at, zap.Int("messages", len(recs)))...)
}

// actionCanceled ends an action cut short by the partition going: the
// aggregate stays parked; its state (and the request) stay as written, so
// the next owner does it again, from the head, at least once.
func (r *Receiver) actionCanceled(k parkKey, action string, at []zap.Field) {
	r.m.ParkAction(action, "canceled")
	r.log.Info("parked aggregate: action cut short by the partition going; its next owner starts it again", at...)
	r.parkIdle(k)
}

// parkedDeadLetter is the dead-letter record of a parked message: as it
// is in the parked topic, with its parking headers.
func (r *Receiver) parkedDeadLetter(rec *kgo.Record) *kgo.Record {
	src := rec.Topic
	for _, h := range rec.Headers {
		if h.Key == park.HeaderSourceTopic {
			src = string(h.Value)
		}
	}
	return &kgo.Record{Topic: r.o.DeadLetter.Topic(src), Key: rec.Key, Value: rec.Value, Headers: rec.Headers, Timestamp: rec.Timestamp}
}

// produceDurably writes rec, retrying with backoff until the broker
// acknowledges it or ctx ends.
func (r *Receiver) produceDurably(ctx context.Context, rec *kgo.Record) error {
	for attempt := 1; ; attempt++ {
		err := r.cl.ProduceSync(ctx, rec).FirstErr()
		if err == nil || ctx.Err() != nil {
			return err
		}
		wait := r.holdBackoff(attempt)
		r.log.Error("parking write failed; retrying", zap.String("topic", rec.Topic), zap.Int("attempt", attempt),
			zap.Duration("wait", wait), zap.Error(err))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// actionPartition returns the pseudo-partition of an action's redriven
// messages: like the ingest's, no offsets and nothing committed, but ended
// with p (its context is p's, and it closes when p does).
func (r *Receiver) actionPartition(p *partition) *partition {
	rp := newLocalPartition()
	rp.cancel()
	rp.topic, rp.partition = p.topic, p.partition
	rp.ctx, rp.cancel = context.WithCancel(p.ctx)
	stop := context.AfterFunc(p.ctx, func() { r.closePartition(rp) })
	cancel := rp.cancel
	rp.cancel = func() { stop(); cancel() }
	return rp
}

// runParked hands a parked message to the handler through a job of rp and
// waits for what becomes of it: handled, skipped, dead-lettered (it does
// not decode), Parked (failed for good again: f says why) or Dropped (the
// partition went).
func (r *Receiver) runParked(rp *partition, src *kgo.Record) (metrics.Outcome, failure) {
	route := r.routes[src.Topic]
	w := &localWait{done: make(chan struct{})}
	// Not held to the window: the aggregate's queued messages may fill it,
	// and they wait for this.
	r.inFlight.Add(1)
	rp.pending.Add(1)
	r.retire(rp) // the deadline watcher watches it while it has a record
	rp.mu.Lock()
	if rp.closed.Load() {
		rp.mu.Unlock()
		rp.pending.Add(-1)
		r.release()
		return metrics.Dropped, failure{}
	}
	j := newJob(r, rp, src, rp.tr.nextSeq())
	rp.tr.push(0, 0, j)
	j.route, j.kind = route, route.Kind
	j.msg.Context, j.msg.Aggregate, j.msg.Kind = route.Context, route.Aggregate, route.Kind
	j.local, j.redriven = w, true
	rp.mu.Unlock()
	j.Run(executor.Resume{})
	<-w.done
	return w.outcome, w.fail
}
