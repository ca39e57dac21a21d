package receiver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"github.com/wowd/wowd/internal/executor"
	"github.com/wowd/wowd/internal/metrics"
	"github.com/wowd/wowd/internal/park"
	"github.com/wowd/wowd/internal/topicsize"
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

// parkedAgg is a parked aggregate of an owned partition. An action keeps
// the entry it started from (parkAction.a) and touches no other: a
// partition lost and taken again gets new entries, with actions of their
// own, while the old incarnation's actions end.
type parkedAgg struct {
	state   park.State // as last written to the state topic (an action's progress included); state.Request is nil: requests are kept apart (parkState.book)
	busy    bool       // an action (redrive, skip, discard) is under way
	lastReq string     // the ID of the last request taken up; cleared when its action ends not done, its partition closed (actionNotDone)
}

// maxActions bounds the actions of a receiver that run at once: each holds
// one redriven message outside the window and a chunk of parked messages.
const maxActions = 4

// redriveChunk is how many parked messages an action reads at a time.
const redriveChunk = 256

// parkState is the receiver's parking state; nil without Options.Park.
type parkState struct {
	mu sync.RWMutex // guards parked and its entries' fields (parkedAgg), loaded, book, handParking and stopping. A leaf: no other lock is taken under it.
	// parked are the parked aggregates of the owned partitions.
	parked map[parkKey]*parkedAgg
	// book is this dispatcher's part of the state topic as the tail read
	// it: the parked aggregates, where a newly assigned partition's are
	// loaded from, the operators' pending requests, and the partitions'
	// owner epochs.
	book *park.Book
	// loaded are the partitions whose parked aggregates are in parked:
	// from loadParked's filling of it to unloadParked's emptying (so
	// also while a revoked partition drains). Parked lists the others'
	// from book.
	loaded map[tp]bool
	// handParking are the aggregates being parked by hand (a park action
	// queued in their mailbox), each with the partition incarnation whose
	// action it is: an incarnation that ended is no reason for the next to
	// wait (see handParkEnded).
	handParking map[parkKey]*partition
	stopping    bool // no more loads and actions start (wg is being waited for)
	// caughtUp is set once the tail read the whole state topic: local
	// (ingest) records can be checked against seen from then on.
	caughtUp atomic.Bool
	// sizes are the parked topics' max.message.bytes, read at start.
	sizes atomic.Pointer[parkSizes]

	actions   chan struct{} // a slot per running action (maxActions)
	tail      *park.Tail
	tailStop  context.CancelFunc
	tailDone  chan struct{}
	catchDone chan struct{} // the background catch-up of startParking, if any; ends with the tail
	leaseDone chan struct{} // the lease's confirmations (lease.run) ended; they stop with the tail
	// ready is closed once Start created the parking topics: loads wait for
	// it, so that an assignment before Start does not read a state topic
	// still being created.
	ready chan struct{}
	wg    sync.WaitGroup // loads and actions; Add only under mu while !stopping
}

// goStart counts a load or an action in wg, unless parking is stopping.
func (ps *parkState) goStart() bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.stopping {
		return false
	}
	ps.wg.Add(1)
	return true
}

// parkedAgg reports the parked aggregate of topic and key, if any. Cheap
// when nothing is parked: one atomic load.
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

// parkedAnywhere reports whether the aggregate is parked in any partition,
// as far as the tail read, or whether that cannot be known yet: for local
// (ingest) records, which belong to no partition.
func (r *Receiver) parkedAnywhere(topic, key string) bool {
	ps := r.park
	if !ps.caughtUp.Load() {
		return true
	}
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	return ps.book.Parked(topic, key) != nil
}

// newParking makes the tail of the state topic; New calls it before making
// the receiver's client, which may join the group (and be assigned
// partitions, which wait for the tail) before Start.
func (r *Receiver) newParking() error {
	ps := &parkState{parked: make(map[parkKey]*parkedAgg), loaded: make(map[tp]bool), book: park.NewBook(), handParking: make(map[parkKey]*partition), actions: make(chan struct{}, maxActions), ready: make(chan struct{})}
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
func (r *Receiver) startParking(start context.Context) {
	ps := r.park
	ctx, cancel := context.WithTimeout(start, startTimeout)
	r.ensureParkingTopics(ctx)
	cancel()
	close(ps.ready)
	tail := ps.tail
	tctx, stop := context.WithCancel(context.Background())
	ps.tailStop, ps.tailDone = stop, make(chan struct{})
	go func() {
		defer close(ps.tailDone)
		tail.Run(tctx)
	}()
	ps.leaseDone = make(chan struct{})
	go func() {
		defer close(ps.leaseDone)
		r.lease.run(tctx, r.cl, r.o.GroupID, func(err error) {
			r.log.Warn("confirming with the group coordinator that this member is still in the group; parking writes wait for it",
				zap.String("group", r.o.GroupID), zap.Error(err))
		})
	}()
	// Local (ingest) records are checked against what the tail read: wait
	// for it to read the topic once, a while, then go on in the background.
	// Until then they are given up (their Kafka copy is handled by the
	// owner of their partition).
	ctx, cancel = context.WithTimeout(tctx, 10*time.Second)
	stopWaiting := context.AfterFunc(start, cancel) // a stop asked during Start waits no longer
	err := r.catchUp(ctx)
	stopWaiting()
	cancel()
	if err == nil {
		ps.caughtUp.Store(true)
		return
	}
	r.log.Warn("reading the parked aggregates' state topic; local-first records are given up until it is read", zap.Error(err))
	ps.catchDone = make(chan struct{})
	go func() {
		defer close(ps.catchDone)
		if r.catchUp(tctx) == nil {
			ps.caughtUp.Store(true)
		}
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
		<-ps.leaseDone
		if ps.catchDone != nil {
			<-ps.catchDone
		}
	}()
	ps.mu.Lock()
	ps.stopping = true
	ps.mu.Unlock()
	done := make(chan struct{})
	go func() {
		ps.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	// Their partitions are closed: loads end at once, actions once their
	// handler returns. A moment for them to notice.
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		return errors.New("an action on a parked aggregate was still running at the shutdown deadline (its handler does not return): it is done again by the partition's next owner")
	}
}

// catchUp waits until the tail read the whole state topic, retrying what
// fails (the topic was just created and the broker does not know it yet,
// the broker is away) until ctx ends.
func (r *Receiver) catchUp(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		err := r.park.tail.CaughtUp(ctx)
		if err == nil || ctx.Err() != nil {
			return err
		}
		if sleepCtx(ctx, min(50*time.Millisecond<<min(attempt, 6), 2*time.Second)) != nil {
			return err
		}
	}
}

// sleepCtx waits for d, or returns ctx's error once it ends first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ensureParkingTopics creates the missing parked topics, each with its
// source's partition count (an aggregate's parked messages then land in the
// partition of its source's number), no retention (a parked message
// waits for an operator however long that takes) and room for a parked
// copy of any record of its source (see parksize.go), and the state topic,
// compacted. It only warns on failure: a write to a missing topic is
// retried until it exists, and a partition waits for a state topic it
// cannot read. Then it reads the parked topics' size limits.
func (r *Receiver) ensureParkingTopics(ctx context.Context) {
	adm := kadm.NewClient(r.cl)
	sources, err := adm.ListTopics(ctx, r.topics...)
	if err != nil {
		r.log.Warn("listing topics to create parking topics; parked topics are not created by wowd, and their max.message.bytes not read: writes to them keep to 1000012-byte batches until a restart reads it", zap.Error(err))
		return
	}
	var create func(topic string, partitions int32, configs map[string]*string) bool
	create = func(topic string, partitions int32, configs map[string]*string) bool {
		resp, err := adm.CreateTopic(ctx, partitions, -1, configs, topic)
		err = errors.Join(err, resp.Err)
		switch {
		case err == nil:
			r.log.Info("parking topic created", zap.String("topic", topic), zap.Int32("partitions", partitions))
			return true
		case errors.Is(err, kerr.TopicAlreadyExists):
		case configs["max.message.bytes"] != nil && (errors.Is(err, kerr.InvalidConfig) || errors.Is(err, kerr.PolicyViolation)):
			// A cluster that caps max.message.bytes (a managed one):
			// its default then, and sizeParkedTopics warns.
			r.log.Warn("creating parking topic: its max.message.bytes refused; creating it with the cluster's default",
				zap.String("topic", topic), zap.String("max_message_bytes", *configs["max.message.bytes"]), zap.Error(err))
			delete(configs, "max.message.bytes")
			return create(topic, partitions, configs)
		default:
			r.log.Warn("creating parking topic; writes to it are retried until it exists",
				zap.String("topic", topic), zap.Error(err))
		}
		return false
	}
	compact, forever := "compact", "-1"
	create(r.o.Park.StateTopic, 1, map[string]*string{"cleanup.policy": &compact})
	var present []string
	for _, src := range r.topics {
		if st, ok := sources[src]; ok && st.Err == nil {
			present = append(present, src)
		}
	}
	want := r.wantParkedMaxBytes(ctx, adm, present)
	created := make(map[string]int32)
	for _, src := range present {
		limit := int32(minParkedMaxBytes)
		if w, ok := want[src]; ok {
			limit = max(w, limit)
		}
		maxBytes := strconv.Itoa(int(limit))
		configs := map[string]*string{"retention.ms": &forever, "max.message.bytes": &maxBytes}
		if create(park.Topic(src), int32(len(sources[src].Partitions)), configs) && configs["max.message.bytes"] != nil {
			created[park.Topic(src)] = limit
		}
	}
	r.sizeParkedTopics(ctx, adm, present, want, created)
}

// stateRead takes a record of the state topic from the tail: it keeps the
// dispatcher's parked aggregates, owner epochs and the operators' requests,
// and starts the action asked for on an aggregate parked in an owned
// partition.
func (r *Receiver) stateRead(key string, s *park.State) {
	ps := r.park
	if s != nil && (s.Dispatcher != r.o.Dispatcher || s.Service != r.o.Service || r.routes[s.Topic] == nil) {
		return
	}
	ps.mu.Lock()
	err := ps.book.Apply(key, s)
	ps.mu.Unlock()
	if err != nil {
		r.log.Warn("reading the parked aggregates' state topic", zap.String("topic", r.o.Park.StateTopic), zap.Error(err))
	}
	switch {
	case s != nil && park.IsRequestKey(key):
		r.maybeAct(parkKey{s.Topic, s.Aggregate}, s.Partition)
	case s == nil && park.IsRequestKey(key):
		// A request deleted: one written before it may be the pending one
		// now (a park by hand deletes only itself, see parkByHand).
		topic, _, agg, err := park.ParseRequestKey(key)
		if err != nil {
			return
		}
		ps.mu.RLock()
		req := ps.book.Request(topic, agg)
		ps.mu.RUnlock()
		if req != nil {
			r.maybeAct(parkKey{topic, agg}, req.Partition)
		}
	}
}

// maybeAct starts the pending request on an aggregate if the aggregate is
// parked in an owned, loaded partition and no action on it runs. A request
// on an aggregate not parked (a stale `wowd parked` run) is deleted by the
// partition's owner.
func (r *Receiver) maybeAct(k parkKey, partition int32) {
	ps := r.park
	r.partsMu.RLock()
	p := r.parts[tp{k.topic, partition}]
	r.partsMu.RUnlock()
	if p == nil || p.isClosed() {
		return // not ours: the owner acts
	}
	p.mu.Lock()
	loading := p.paused&pauseLoading != 0 || p.parkEpoch.Load() == 0
	p.mu.Unlock()
	if loading {
		return // loadParked looks at the requests once loaded
	}
	ps.mu.Lock()
	req := ps.book.Request(k.topic, k.key)
	a := ps.parked[k]
	var act *park.Request
	var from *parkedAgg // the entry the action starts from; nil for a park by hand
	byHand := req != nil && req.Request.Action == park.Park
	// A request asked on an earlier parking of the aggregate (the state
	// it was asked on parked at another time), or answered by the state
	// (an action whose head failed again wrote it, and its delete of the
	// request was lost), or a skip asked on another head than the one
	// that failed now, is void: done now, it would act on a message
	// nobody asked about (a skip would dead-letter it).
	void := req != nil && a != nil && !byHand && ((a.state.Answered != "" && req.Request.ID == a.state.Answered) ||
		!req.Since.Equal(a.state.Since) || skipsUnseen(req, &a.state))
	stale := req != nil && ((a == nil) != byHand || void)
	busy := a != nil && a.busy
	switch {
	case void:
	case byHand && a == nil && ps.handParking[k] != p:
		ps.handParking[k], act = p, req.Request
	case req != nil && a != nil && !a.busy && req.Request.ID != a.lastReq:
		a.busy, a.lastReq, act, from = true, req.Request.ID, req.Request, a
	}
	ps.mu.Unlock()
	switch {
	case act != nil:
		r.startAction(k, p, from, *act)
	case stale && r.lease.holds() && !r.stale(p): // a member cut off, or no longer the one p was assigned to, leaves it to the owner
		r.log.Info("request on an aggregate that is not parked (or, to park it, already is), asked on an earlier parking of it or, to skip, on another head, or answered already; deleting it", zap.String("topic", k.topic), zap.String("aggregate", k.key),
			zap.String("action", req.Request.Action), zap.String("by", req.Request.By))
		ps.mu.RLock()
		keys := ps.book.RequestKeys(k.topic, k.key, req.Request.ID)
		ps.mu.RUnlock()
		if (byHand || busy) && len(keys) > 0 {
			// To park an aggregate parked already, or void while an
			// action runs: only this request goes; one asked before it
			// (maybe the one running, which its next owner resumes should
			// it be cut short) still counts.
			keys = keys[len(keys)-1:]
		}
		for _, key := range keys {
			r.cl.Produce(p.ctx, &kgo.Record{Topic: r.o.Park.StateTopic, Key: []byte(key)}, func(*kgo.Record, error) {})
		}
	}
}

// skipsUnseen reports whether req, the state a request was asked on, asks
// to skip cur's head, which failed, without having shown that failure: the
// asker saw another head, or this one before it failed (req.Skipped: a
// skip's progress had moved the head to a message not tried yet). The skip
// would dead-letter a message whose failure the asker never saw. So a skip
// asked a second time while the first ran (a double click, a command run
// again) is void once the first moved on to a message that failed again.
// A head that has not failed (cur.Skipped) is dead-lettered by no skip, so
// a skip asked on an earlier head may go on.
func skipsUnseen(req, cur *park.State) bool {
	return req.Request.Action == park.Skip && !cur.Skipped && (req.Head != cur.Head || req.Skipped)
}

// loadParked waits until the tail read the whole state topic, loads the
// parked aggregates of the newly assigned partition p, lifts its
// pauseLoading, and starts the actions asked for while no one owned them.
func (r *Receiver) loadParked(p *partition) {
	ps := r.park
	defer ps.wg.Done()
	select {
	case <-ps.ready: // Start created the topics; r.cl is set
	case <-p.ctx.Done():
		return
	}
	for {
		ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
		err := r.catchUp(ctx)
		cancel()
		if err == nil {
			break
		}
		if p.ctx.Err() != nil {
			return
		}
		r.log.Warn("reading the parked aggregates; the partition waits for them before handling anything",
			zap.String("topic", p.topic), zap.Int32("partition", p.partition), zap.String("state_topic", r.o.Park.StateTopic),
			zap.Error(err))
	}
	ps.caughtUp.Store(true)
	adopted, err := r.takeOwnership(p)
	if err != nil {
		return // p.ctx ended: the partition is gone
	}
	var keys []parkKey
	ps.mu.Lock()
	if p.isClosed() {
		ps.mu.Unlock()
		return
	}
	for k, a := range ps.parked { // what an earlier ownership left is not current
		if k.topic == p.topic && a.state.Partition == p.partition {
			delete(ps.parked, k)
		}
	}
	for _, s := range adopted {
		k := parkKey{s.Topic, s.Aggregate}
		ps.parked[k] = &parkedAgg{state: s}
		keys = append(keys, k)
	}
	ps.loaded[tp{p.topic, p.partition}] = true
	r.nparked.Store(int32(len(ps.parked)))
	ps.mu.Unlock()
	p.mu.Lock()
	r.unpauseLocked(p, pauseLoading)
	p.mu.Unlock()
	r.parkRoom()
	r.log.Debug("parked aggregates loaded", zap.String("topic", p.topic), zap.Int32("partition", p.partition), zap.Int("parked", len(keys)))
	// The requests are listed only now: one the tail read while p was
	// loading found it loading and was left for here.
	ps.mu.RLock()
	for _, req := range ps.book.Requests(p.topic, p.partition) {
		if ps.parked[parkKey{req.Topic, req.Aggregate}] == nil {
			keys = append(keys, parkKey{req.Topic, req.Aggregate}) // to park by hand, or stale: maybeAct decides
		}
	}
	ps.mu.RUnlock()
	for _, k := range keys {
		r.maybeAct(k, p.partition)
	}
}

// takeOwnership gives the new incarnation of p an owner epoch above every
// one the state topic holds for p (see park.Book), adopts p's parked
// aggregates at that epoch and writes p's owner record, all durably, then
// deletes the records of p the epoch leaves behind. From then on, a
// parking write that a member which lost p delivers late is passed over by
// every reader. It returns the adopted states, or p.ctx's error.
func (r *Receiver) takeOwnership(p *partition) ([]park.State, error) {
	ps := r.park
	_, generation := r.cl.GroupMetadata()
	ps.mu.RLock()
	parked, old := ps.book.Partition(p.topic, p.partition)
	epoch := ps.book.NextEpoch(p.topic, p.partition, int64(generation))
	ps.mu.RUnlock()
	adopted := make([]park.State, 0, len(parked))
	recs := make([]*kgo.Record, 0, len(parked))
	for _, s := range parked {
		a := *s
		a.Epoch = epoch
		adopted = append(adopted, a)
		recs = append(recs, stateRecord(r.o.Park.StateTopic, &a))
		old = append(old, s.RecordKey())
	}
	// The adopted states before the owner record: a reader that sees the
	// owner record sees them too.
	if err := r.produceDurably(p, recs...); err != nil {
		return nil, err
	}
	owner := park.OwnerRecord(r.o.Park.StateTopic, r.o.Service, r.o.Dispatcher, p.topic, p.partition, epoch)
	if err := r.produceDurably(p, owner); err != nil {
		return nil, err
	}
	// Deleting what no reader keeps any more only tidies the topic: a
	// delete lost (or late) changes nothing.
	for _, k := range old {
		r.cl.Produce(p.ctx, &kgo.Record{Topic: r.o.Park.StateTopic, Key: []byte(k)}, func(*kgo.Record, error) {})
	}
	p.parkEpoch.Store(epoch)
	r.log.Debug("partition's parking owner epoch taken", zap.String("topic", p.topic), zap.Int32("partition", p.partition),
		zap.Int64("epoch", epoch), zap.Int("adopted", len(adopted)), zap.Int("deleted", len(old)))
	return adopted, nil
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
		if !r.park.goStart() {
			return // stopping: the partitions are not handled any more
		}
		p.mu.Lock()
		if p.paused == 0 {
			cl.PauseFetchPartitions(map[string][]int32{p.topic: {p.partition}})
		}
		p.paused |= pauseLoading
		p.mu.Unlock()
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
	for _, p := range gone {
		delete(ps.loaded, tp{p.topic, p.partition})
	}
	r.nparked.Store(int32(len(ps.parked)))
	ps.mu.Unlock()
	r.parkRoom()
}

// reservePark takes one of the max-parked slots for an aggregate about to
// park, if one is free: parks of different aggregates run concurrently. The
// job holds the slot (j.slot) until its aggregate is parked or the job is
// dropped. A job that waited for a slot waits no more.
func (j *job) reservePark() bool {
	r := j.r
	if int(r.parkSlots.Add(1)+r.nparked.Load()) > r.o.Park.Max {
		r.parkSlots.Add(-1)
		return false
	}
	j.slot = true
	j.endParkWait()
	r.parkRoom()
	return true
}

// waitPark counts the job among those waiting for a max-parked slot, after
// reservePark found none, and pauses fetching unless there is room by now
// (an unpark since reservePark, whose parkRoom did not see this job yet):
// then the job just tries again. It reports whether it paused fetching.
func (j *job) waitPark() bool {
	r := j.r
	if !j.waiting {
		j.waiting = true
		r.parkWaiting.Add(1)
	}
	r.parkFullMu.Lock()
	defer r.parkFullMu.Unlock()
	if r.parkFull.Load() || int(r.nparked.Load()+r.parkSlots.Load()) < r.o.Park.Max {
		return false
	}
	r.parkFull.Store(true)
	return true
}

// endParkWait takes the job out of the count of those waiting for a
// max-parked slot, if it is in it.
func (j *job) endParkWait() {
	if j.waiting {
		j.waiting = false
		j.r.parkWaiting.Add(-1)
	}
}

// releasePark gives the job's max-parked slot back, if it holds one, and
// ends its wait for one, if it waits: every path on which a job stops
// needing a slot (its aggregate parked, it was finished, abandoned or
// dropped) passes here.
func (j *job) releasePark() {
	waited := j.waiting
	j.endParkWait()
	if j.slot {
		j.slot = false
		j.r.parkSlots.Add(-1)
		j.r.parkRoom()
	} else if waited {
		j.r.parkRoom()
	}
}

// parkRoom lifts the max-parked pause once there is room again, or no job
// waits for a slot any more (it parked behind its aggregate parked
// meanwhile, or it was given up with its partition).
func (r *Receiver) parkRoom() {
	if r.park == nil {
		return
	}
	r.parkFullMu.Lock()
	lift := r.parkFull.Load() && (r.parkWaiting.Load() == 0 || int(r.nparked.Load()+r.parkSlots.Load()) < r.o.Park.Max)
	if lift {
		r.parkFull.Store(false)
	}
	r.parkFullMu.Unlock()
	if lift {
		r.log.Info("parked aggregates below max-parked again, or no message waits to park any more: fetching resumes", zap.Int("max_parked", r.o.Park.Max))
		r.notify()
	}
}

// park writes the job's record to the parked topic and finishes it: the
// failed message that parks its aggregate (the aggregate's state is written
// too), or a later message of a parked aggregate. Write failures are retried
// with backoff while the partition is owned: the record is not finished
// before its write is acknowledged, so it holds its partition's commit but
// is never lost. Only fetched records park: a local (ingest) one is given
// up instead, so that its copy in Kafka goes through the owner of its
// partition.
func (j *job) park() {
	r := j.r
	k := parkKey{j.rec.Topic, j.msg.AggregateID}
	head, parked := r.parkedAgg(k.topic, k.key)
	if !parked && !j.slot && !j.reservePark() {
		if j.waitPark() {
			r.log.Warn("max-parked reached: the failed message waits, and fetching pauses, until an aggregate is unparked (wowd parked redrive|skip|discard)",
				zap.Int("max_parked", r.o.Park.Max), zap.String("topic", k.topic), zap.Int32("partition", j.rec.Partition),
				zap.Int64("offset", j.rec.Offset))
		}
		j.tries++
		j.after(r.holdBackoff(j.tries), j.park)
		return
	}
	if parked {
		j.releasePark() // parked meanwhile (a redrive failed again): not the head
	}
	f := j.failure
	since := time.Now()
	if parked {
		f = failure{class: "parked", reason: "its aggregate is parked: " + head.Reason}
		since = head.Since
	}
	src := j.rec
	hs := make([]kgo.RecordHeader, 0, len(src.Headers)+9)
	hs = append(hs, src.Headers...)
	hs = append(hs,
		kgo.RecordHeader{Key: park.HeaderService, Value: []byte(r.o.Service)},
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
	if !r.lease.holds() || r.stale(j.p) || j.p.parkEpoch.Load() == 0 { // no epoch: not loaded, see loadParked
		j.releasePark() // park reserves again
		j.waitLease(j.park)
		return
	}
	// TryProduce, not Produce, as for dead letters (writeDeadLetter): the
	// caller is the goroutine that concluded the record.
	r.cl.TryProduce(j.p.ctx, rec, func(w *kgo.Record, err error) {
		switch {
		case errors.Is(err, kgo.ErrMaxBuffered):
			j.releasePark() // park reserves again
			j.after(r.holdBackoff(1), j.park)
		case err == nil && parked:
			j.finish(metrics.Parked)
		case err == nil:
			st := &park.State{
				Service: r.o.Service, Dispatcher: r.o.Dispatcher, Topic: src.Topic, Partition: src.Partition, Offset: src.Offset,
				Aggregate: k.key, Head: park.Position{Partition: w.Partition, Offset: w.Offset},
				Since: since, Class: f.class, Reason: truncate(f.reason, maxErrorHeader), Attempts: f.attempts,
				Epoch: j.p.parkEpoch.Load(),
			}
			j.tries = 0
			// Not from within this promise: a produce there may wait for
			// buffer room that only finished promises give back.
			go j.writeParked(st)
		case j.p.ctx.Err() != nil:
			j.abandon() // gives the slot back
		case topicsize.TooLarge(err):
			j.releasePark() // park reserves again
			j.tries++
			wait := r.holdBackoff(j.tries)
			j.parkTooLarge(rec, j.tries, wait, err)
			j.after(wait, j.park)
		default:
			j.releasePark() // park reserves again
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
	if !r.lease.holds() || r.stale(j.p) {
		j.waitLease(func() { j.writeParked(st) })
		return
	}
	r.cl.TryProduce(j.p.ctx, stateRecord(r.o.Park.StateTopic, st), func(_ *kgo.Record, err error) {
		switch {
		case errors.Is(err, kgo.ErrMaxBuffered): // as in park
			j.after(r.holdBackoff(1), func() { j.writeParked(st) })
		case err == nil:
			ps := r.park
			if r.lockKeepsParking(j.p, st.Epoch) {
				ps.parked[parkKey{st.Topic, st.Aggregate}] = &parkedAgg{state: *st}
				r.nparked.Store(int32(len(ps.parked)))
			}
			ps.mu.Unlock()
			j.releasePark() // counted in nparked now
			r.m.ParkAction("park", "done")
			r.log.Warn("aggregate parked: this message failed for good; it and the aggregate's later messages wait in the parked topic for wowd parked redrive|skip|discard",
				zap.String("topic", st.Topic), zap.Int32("partition", st.Partition), zap.Int64("offset", st.Offset),
				zap.String("aggregate", st.Aggregate), zap.String("class", st.Class), zap.String("reason", st.Reason))
			j.finish(metrics.Parked)
		case j.p.ctx.Err() != nil:
			// The parked copy is written; the record comes again to the next
			// owner and is parked again: a duplicate in the parked topic,
			// never a loss.
			j.abandon() // gives the slot back
		default:
			j.tries++
			wait := r.holdBackoff(j.tries)
			r.log.Error("parked-state write failed; retrying, the source offset stays uncommitted",
				zap.String("state_topic", r.o.Park.StateTopic), zap.Int("attempt", j.tries), zap.Duration("wait", wait), zap.Error(err))
			j.after(wait, func() { j.writeParked(st) })
		}
	})
}

// lockKeepsParking takes park.mu and reports whether a parking written
// under the incarnation p, at the owner epoch epoch, stays with this
// member: p is still open (one being revoked is its own until closed), or
// the incarnation that took its place is open under the same ownership (a
// rewind, see rewind). A partition that went is its next owner's, which
// loads the parking from the state topic. Decided under park.mu, which the
// caller releases: a partition closes before unloadParked takes park.mu to
// forget its aggregates. A rewind puts its incarnation in parts before it
// closes p, and a rebalance replaces or removes p before or under partsMu,
// so one look-up after p was seen closed finds what took its place, if
// anything (the stop closes p in place: nothing does).
func (r *Receiver) lockKeepsParking(p *partition, epoch int64) bool {
	for again := false; ; again = true {
		r.partsMu.RLock()
		cur := r.parts[tp{p.topic, p.partition}]
		r.partsMu.RUnlock()
		if hook := testHookKeepsParking.Load(); hook != nil {
			(*hook)()
		}
		r.park.mu.Lock()
		if !p.isClosed() {
			return true
		}
		if cur != p || again {
			return cur != p && cur != nil && !cur.isClosed() && cur.parkEpoch.Load() == epoch
		}
		r.park.mu.Unlock() // p closed after the look-up: look once more
	}
}

// testHookKeepsParking, when a test sets it, runs in lockKeepsParking
// between each look-up of the partition and taking park.mu: where a rewind,
// a loss or the stop may come in between.
var testHookKeepsParking atomic.Pointer[func()]

func stateRecord(topic string, st *park.State) *kgo.Record {
	return &kgo.Record{Topic: topic, Key: []byte(st.RecordKey()), Value: st.Marshal()}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// startAction queues an operator's action on a parked aggregate of p in its
// mailbox: it runs once the aggregate's earlier messages are done, and its
// later ones wait for it. The action counts as unfinished in p, so a revoke
// waits for it like for a record. a is the parked aggregate's entry the
// action starts from (nil for a park by hand).
func (r *Receiver) startAction(k parkKey, p *partition, a *parkedAgg, req park.Request) {
	route := r.routes[k.topic]
	if route == nil || !r.park.goStart() {
		r.parkIdle(k, a)
		r.handParkEnded(k, p, req)
		return
	}
	t := &parkAction{r: r, p: p, k: k, a: a, req: req}
	p.pending.Add(1)
	if err := route.Group.Submit(k.key, t); err != nil {
		t.ended()
		r.parkIdle(k, a)
		r.handParkEnded(k, p, req)
	}
}

// handParkEnded ends p's attempt to park k by hand, if req is one: p's
// mark goes, whichever way the attempt ended (done, refused, never run).
// When p has closed meanwhile, the request, still pending, is looked at
// again for the incarnation that took p's place, if one is loaded: a
// rewound partition's (no load to look at it), or one whose load saw the
// mark still set.
func (r *Receiver) handParkEnded(k parkKey, p *partition, req park.Request) {
	if req.Action != park.Park {
		return
	}
	ps := r.park
	ps.mu.Lock()
	if ps.handParking[k] == p {
		delete(ps.handParking, k)
	}
	ps.mu.Unlock()
	if p.isClosed() {
		r.maybeAct(k, p.partition)
	}
}

// parkIdle marks the action on the aggregate's entry a over, and starts the
// request that came while it ran, if any. An entry that is not the
// aggregate's any more (its partition was lost, and maybe loaded again
// with a new entry and an action of its own) is left alone.
func (r *Receiver) parkIdle(k parkKey, a *parkedAgg) {
	ps := r.park
	var partition int32
	ps.mu.Lock()
	ours := a != nil && ps.parked[k] == a
	if ours {
		a.busy = false
		partition = a.state.Partition
	}
	ps.mu.Unlock()
	if ours {
		r.maybeAct(k, partition)
	}
}

// parkAction is an operator's action on a parked aggregate, as a task of
// the aggregate's mailbox.
type parkAction struct {
	r   *Receiver
	p   *partition
	k   parkKey
	a   *parkedAgg // the entry it started from (see parkedAgg); nil for a park by hand
	req park.Request
	res executor.Resume // the action's task's: where a redrive's handler attempts run
}

// ended takes the action out of its partition's unfinished count and the
// running loads and actions.
func (t *parkAction) ended() {
	r, p := t.r, t.p
	r.lower(p)
	r.recheckShares() // the action held a place in its partition's share
	r.changed.Notify()
	r.park.wg.Done()
}

// Run implements executor.Task: the action runs on a goroutine of its own
// (it waits for Kafka and for the handler), the mailbox waits for it.
func (t *parkAction) Run(res executor.Resume) executor.Status {
	t.res = res
	go func() {
		defer res.Complete(false)
		defer t.ended()
		select {
		case t.r.park.actions <- struct{}{}:
			defer func() { <-t.r.park.actions }()
		case <-t.p.ctx.Done():
			t.r.actionNotDone(t.k, t.a)
			t.r.handParkEnded(t.k, t.p, t.req)
			return
		}
		t.run()
	}()
	return executor.Pending
}

func (t *parkAction) run() {
	r, p, k, req := t.r, t.p, t.k, t.req
	ps := r.park
	if req.Action == park.Park {
		r.parkByHand(p, k, t.a, req)
		return
	}
	// Still the entry it started from, and its request still pending (not
	// answered by an action that ran meanwhile).
	a := t.a
	ps.mu.RLock()
	current := ps.parked[k] == a
	pending := ps.book.RequestKeys(k.topic, k.key, req.ID) != nil
	var st park.State
	if a != nil {
		st = a.state
	}
	ps.mu.RUnlock()
	at := []zap.Field{zap.String("action", req.Action), zap.String("by", req.By), zap.String("topic", k.topic),
		zap.Int32("partition", p.partition), zap.String("aggregate", k.key)}
	if a == nil || !current || !pending || p.isClosed() {
		r.log.Debug("parked aggregate: action not started; its partition closed, the aggregate is not parked here any more, or the request was answered meanwhile", at...)
		if pending {
			r.actionNotDone(k, a) // p closed and a kept (rewound): a takes the request up again
		} else {
			r.parkIdle(k, a)
		}
		return
	}
	if req.Action != park.Redrive && !r.o.DeadLetter.Enabled {
		r.log.Error("parked aggregate: "+req.Action+" needs the dead-letter topic, and dead letters are disabled (dead-letter.enabled); the aggregate stays parked", at...)
		r.m.ParkAction(req.Action, "failed")
		r.endRequest(p, k, a, req)
		return
	}
	if req.Action != park.Redrive && r.versions != nil {
		r.versions.forget(k) // a hole on purpose: the next version is taken as it comes
	}
	r.log.Info("parked aggregate: action starts", at...)
	adm := kadm.NewClient(r.cl)
	rp := r.actionPartition(p)
	defer r.closePartition(rp)
	// floor: the aggregate's source records below it are resolved. A
	// parked copy below it is a duplicate (written again after a crash,
	// or delivered again while the commit was behind): passed over, so
	// the handler never sees a message again after a later one.
	from, n, floor := st.Head.Offset, 0, st.Offset
	for {
		recs, next, err := park.ParkedFrom(p.ctx, r.parkClientOpts(), adm, &st, from, redriveChunk)
		if err != nil {
			if p.ctx.Err() != nil {
				r.actionCanceled(k, a, req.Action, at)
				return
			}
			r.log.Error("parked aggregate: reading its parked messages; the aggregate stays parked, ask again", append(at, zap.Error(err))...)
			r.m.ParkAction(req.Action, "failed")
			r.endRequest(p, k, a, req)
			return
		}
		if len(recs) == 0 {
			break
		}
		for _, rec := range recs {
			src, err := park.Source(rec)
			if err == nil && src.Partition == st.Partition && src.Offset < floor {
				r.log.Debug("parked aggregate: a duplicate parked copy passed over", append(at, zap.Int64("offset", src.Offset))...)
				continue
			}
			// Nothing of the aggregate is handed over outside the lease:
			// past it, another member may own the partition and redrive
			// the aggregate too.
			if err := r.awaitLease(p, at); err != nil {
				r.actionCanceled(k, a, req.Action, at)
				return
			}
			// A skip's head is its first message, unless Head is a
			// message that has not failed: an earlier action's progress
			// moved it past the one that did (st.Skipped), or the
			// aggregate was parked by hand.
			// The same message is the one the operator decided about: a
			// redrive hands it over even at a version gap (it parked at
			// it), and parks the aggregate again at a later one.
			decided := n == 0 && st.HeadFailed()
			headSkip := req.Action == park.Skip && decided
			deadLetter := req.Action == park.Discard || headSkip
			n++
			if err != nil {
				r.log.Error("parked aggregate: a parked record has no source; dead-lettering it", append(at, zap.Error(err))...)
				deadLetter = true
			} else {
				if src.Partition == st.Partition { // offsets of one partition only
					floor = max(floor, src.Offset+1)
				}
			}
			if deadLetter {
				if err := r.produceParkedDeadLetter(p, rec, at); err != nil {
					r.actionCanceled(k, a, req.Action, at)
					return
				}
				r.m.Count(metrics.Discarded, 1) // not a handler's failure: its parking counted that
				continue
			}
			o, f := r.runParked(rp, src, t.res, decided)
			switch o {
			case metrics.Dropped:
				r.actionCanceled(k, a, req.Action, at)
				return
			case metrics.Parked:
				// Failed again: the aggregate stays parked, this message its head.
				st.Head = park.Position{Partition: rec.Partition, Offset: rec.Offset}
				st.Offset, st.Class, st.Reason, st.Attempts = src.Offset, f.class, truncate(f.reason, maxErrorHeader), f.attempts
				st.Skipped = false   // a head that failed: a skip dead-letters it
				st.Answered = req.ID // should the request's delete below be lost, it is not done again on this head
				if err := r.produceDurably(p, stateRecord(r.o.Park.StateTopic, &st)); err != nil {
					r.actionCanceled(k, a, req.Action, at)
					return
				}
				ps.mu.Lock()
				if ps.parked[k] == a {
					a.state = st
				}
				ps.mu.Unlock()
				r.m.ParkAction(req.Action, "failed")
				r.log.Warn("parked aggregate: a parked message failed again; the aggregate stays parked with it at the head",
					append(at, zap.Int64("offset", src.Offset), zap.String("class", f.class), zap.String("reason", f.reason))...)
				r.endRequest(p, k, a, req)
				return
			}
		}
		// Progress: an action cut short by a rebalance starts again from
		// here, not from the first head. Head is past the message that
		// failed (handed over, or dead-lettered): it is a message that
		// has not failed (Skipped), whichever action moved it, so a skip
		// (this one done again, or one asked after a redrive cut short)
		// dead-letters nothing in the head's place. A skip cut short
		// before its first progress dead-letters the head again: a
		// duplicate dead letter, never a hole.
		from = next
		st.Head = park.Position{Partition: st.Head.Partition, Offset: next}
		st.Offset = floor // the source offset from which records are still parked
		st.Skipped = true
		if err := r.produceDurably(p, stateRecord(r.o.Park.StateTopic, &st)); err != nil {
			r.actionCanceled(k, a, req.Action, at)
			return
		}
		// The entry follows the state topic: done again on it (its
		// partition rewound, see actionNotDone), the action starts from
		// this progress, like the next owner, not from the head the
		// entry was loaded with (a skip would dead-letter that head
		// again, and the messages redriven since would be handed over
		// again after later ones); and the aggregate's messages below
		// Offset delivered again are passed over.
		ps.mu.Lock()
		if ps.parked[k] == a {
			a.state = st // st.Request is nil, as a.state's (st is a copy)
		}
		ps.mu.Unlock()
	}
	// Every parked message is handled (or dead-lettered): unpark.
	tomb := &kgo.Record{Topic: r.o.Park.StateTopic, Key: []byte(st.RecordKey())}
	if err := r.produceDurably(p, tomb); err != nil {
		r.actionCanceled(k, a, req.Action, at)
		return
	}
	// Before the entry goes: the aggregate's records behind the action in
	// its mailbox, or fetched later, below floor are resolved.
	if st.Partition == p.partition {
		p.noteUnparked(k.key, floor)
	}
	ps.mu.Lock()
	if ps.parked[k] == a {
		delete(ps.parked, k)
		r.nparked.Store(int32(len(ps.parked)))
	}
	ps.mu.Unlock()
	r.parkRoom()
	r.m.ParkAction(req.Action, "done")
	r.log.Info("parked aggregate: unparked", append(at, zap.Int("messages", n))...)
	r.endRequest(p, k, a, req)
}

// endRequest deletes the request acted on from the state topic, with the
// requests written before it (it answered them too), oldest first, and
// lets the aggregate take the next. Each request has a key of its own, so
// one written meanwhile stays pending, however late a delete lands. a is
// the entry the action started from, or made (see parkIdle).
func (r *Receiver) endRequest(p *partition, k parkKey, a *parkedAgg, req park.Request) {
	ps := r.park
	ps.mu.RLock()
	keys := ps.book.RequestKeys(k.topic, k.key, req.ID)
	ps.mu.RUnlock()
	lost := false
	for _, key := range keys {
		tomb := &kgo.Record{Topic: r.o.Park.StateTopic, Key: []byte(key)}
		if err := r.produceDurably(p, tomb); err != nil {
			r.log.Warn("deleting a request acted on; the partition's owner deletes it once it sees it answered", zap.String("aggregate", k.key), zap.Error(err))
			lost = true
			break
		}
	}
	r.parkIdle(k, a)
	if lost {
		// p closed: the incarnation that took its place (a rewind keeps
		// the ownership and its entries, and loads nothing to look at the
		// requests again) finds the request answered (the aggregate
		// unparked, or its state answering it) and deletes it now, so
		// that it never meets a later parking of the aggregate.
		r.maybeAct(k, p.partition)
	}
}

// actionCanceled ends an action cut short by the partition going: the
// aggregate stays parked, the request pending, so the next owner does it
// again from the last progress recorded, at least once. a is the entry the
// action started from: still the aggregate's only if the partition was
// rewound (the same ownership, see rewind). An entry of an incarnation
// that took the partition again is left alone: it has an action of its
// own for the request, and doing the request once more after that one
// ended would act on what it left (a skip would skip its new head).
func (r *Receiver) actionCanceled(k parkKey, a *parkedAgg, action string, at []zap.Field) {
	r.m.ParkAction(action, "canceled")
	r.log.Info("parked aggregate: action cut short by the partition going; its next owner starts it again", at...)
	r.actionNotDone(k, a)
}

// actionNotDone ends an action on the entry a that its partition's closing
// stopped before it was done (cut short, or not started: waiting for an
// action slot or its turn in the mailbox) with its request still pending.
// If a is still the aggregate's entry (the partition was rewound: the same
// ownership, no load to look at the request again, see rewind), the entry
// forgets that it took the request up, so the request is acted on again
// for the incarnation that took p's place; an entry that is not the
// aggregate's any more is left alone (see actionCanceled).
func (r *Receiver) actionNotDone(k parkKey, a *parkedAgg) {
	r.park.mu.Lock()
	if a != nil && r.park.parked[k] == a {
		a.lastReq = ""
	}
	r.park.mu.Unlock()
	r.parkIdle(k, a)
}

// parkedDeadLetter is the dead-letter record of a parked message: as it
// is in the parked topic, with its parking headers, less the wowd-dlq-*
// headers of an earlier failure (a replayed dead letter's), which would
// contradict them.
func (r *Receiver) parkedDeadLetter(rec *kgo.Record) *kgo.Record {
	src := rec.Topic
	for _, h := range rec.Headers {
		if h.Key == park.HeaderSourceTopic {
			src = string(h.Value)
		}
	}
	return &kgo.Record{Topic: r.o.DeadLetter.Topic(src), Key: rec.Key, Value: rec.Value, Headers: withoutDeadLetterHeaders(rec.Headers), Timestamp: rec.Timestamp}
}

// waitLease runs fn again after a backoff, unless the partition goes
// meanwhile: the member's lease ended (see lease.go), so a parking write
// now could land after another member took the partition over.
func (j *job) waitLease(fn func()) {
	r := j.r
	j.tries++
	wait := r.holdBackoff(j.tries)
	r.log.Warn("parking write held: no answer from the group coordinator for most of a session, or the membership the partition was assigned under has ended; the partition may be another member's already",
		zap.String("topic", j.rec.Topic), zap.Int32("partition", j.rec.Partition), zap.Int64("offset", j.rec.Offset),
		zap.Int("attempt", j.tries), zap.Duration("wait", wait))
	j.after(wait, fn)
}

// awaitLease returns once the member's lease holds (see lease.go) and p is
// not stale (see stale), or p's context's error: an action on a parked
// aggregate goes on only while no other member can own its partition.
func (r *Receiver) awaitLease(p *partition, at []zap.Field) error {
	ctx := p.ctx
	for attempt := 1; !r.lease.holds() || r.stale(p); attempt++ {
		if attempt == 1 {
			r.log.Warn("parked aggregate: action held, no answer from the group coordinator for most of a session, or the membership the partition was assigned under has ended; the partition may be another member's already", at...)
		}
		if err := sleepCtx(ctx, r.holdBackoff(attempt)); err != nil {
			return err
		}
	}
	return nil
}

// errStaleMembership is the error of a parking write not made: the
// partition was assigned under a membership that has ended (see stale).
var errStaleMembership = errors.New("the partition was assigned under a group membership that has ended")

// stale reports whether p was assigned under a group membership that has
// ended: the coordinator dropped this member, which joins again under a new
// member ID, and kgo keeps the partitions it had until the next assignment
// lets them go (see retake). Another member may own p meanwhile, at an
// owner epoch the stale incarnation's reader has seen: its takeOwnership
// would write an epoch above it and fence that owner's parkings out (every
// state it writes after would be passed over, and the messages it parks
// behind them lost to the next owner). So a stale incarnation writes no
// parking state. The lease alone does not tell: the new membership's
// answers extend it.
func (r *Receiver) stale(p *partition) bool {
	m, _ := r.cl.GroupMetadata()
	return m != p.member
}

// errLeaseEnded is the error of a parking write not made: the member's
// lease ended (see lease.go).
var errLeaseEnded = errors.New("no answer from the group coordinator for most of a session: the partition may be another member's already")

// produceDurably writes recs, retrying with backoff until the broker
// acknowledges them all or ctx ends. Each attempt starts only within the
// member's lease (see lease.go).
func (r *Receiver) produceDurably(p *partition, recs ...*kgo.Record) error {
	return r.produceDurablyUntil(p, nil, recs...)
}

// produceDurablyUntil is produceDurably that also returns a write error
// for which stop, if not nil, reports true.
func (r *Receiver) produceDurablyUntil(p *partition, stop func(error) bool, recs ...*kgo.Record) error {
	if len(recs) == 0 {
		return nil
	}
	ctx := p.ctx
	r.lease.await(ctx, 2*r.lease.interval()) // quietly, for the confirmation that follows a join
	for attempt := 1; ; attempt++ {
		var err error
		switch {
		case !r.lease.holds():
			err = errLeaseEnded
		case r.stale(p):
			err = errStaleMembership
		default:
			err = r.cl.ProduceSync(ctx, recs...).FirstErr()
		}
		if err == nil || ctx.Err() != nil || (stop != nil && stop(err)) {
			return err
		}
		wait := r.holdBackoff(attempt)
		if err == errStaleMembership {
			r.log.Info("parking write held: the partition was assigned under a group membership that has ended; the next assignment lets it go",
				zap.String("topic", p.topic), zap.Int32("partition", p.partition), zap.Int("attempt", attempt), zap.Duration("wait", wait))
		} else {
			r.log.Error("parking write failed; retrying", zap.String("topic", recs[0].Topic), zap.Int("attempt", attempt),
				zap.Duration("wait", wait), zap.Error(err))
		}
		if err := sleepCtx(ctx, wait); err != nil {
			return err
		}
	}
}

// actionPartition returns the pseudo-partition of an action's redriven
// messages: like the ingest's, no offsets and nothing committed, outside
// the window (maxActions bounds them), and ended with p (its context is
// p's, and it closes when p does).
//
// The close is registered on rp's own context, which p's ending cancels,
// once rp is complete: when p has ended already, it runs at once on a
// goroutine of its own, which must find rp as it stays. (Registered on
// p's context, with rp's cancel then replaced by one that unregisters it,
// that goroutine read the cancel while it was being replaced.) Closing rp
// first cancels its context, which runs the close again (a no-op) and takes
// the registration off p's context with it.
func (r *Receiver) actionPartition(p *partition) *partition {
	rp := newLocalPartition()
	rp.cancel()
	rp.topic, rp.partition, rp.unwindowed, rp.member = p.topic, p.partition, true, p.member
	rp.of = p
	rp.ctx, rp.cancel = context.WithCancel(p.ctx)
	context.AfterFunc(rp.ctx, func() { r.closePartition(rp) })
	return rp
}

// runParked hands a parked message to the handler through a job of rp and
// waits for what becomes of it: handled, skipped, dead-lettered (it does
// not decode), Local (it was handled locally first), Parked (failed for
// good again: f says why) or Dropped (the partition went).
func (r *Receiver) runParked(rp *partition, src *kgo.Record, place executor.Resume, decided bool) (metrics.Outcome, failure) {
	route := r.routes[src.Topic]
	w := newLocalWait(src.Topic, string(src.Key))
	rp.pending.Add(1)
	r.retire(rp) // the deadline watcher watches it while it has a record
	rp.mu.Lock()
	if rp.closed.Load() {
		rp.mu.Unlock()
		r.lower(rp)
		return metrics.Dropped, failure{}
	}
	// src shares no memory with a fetched batch: park.ParkedFrom returns
	// copies (the parked topic's reader is a client of its own, without
	// the receiver's hook, ownBytes).
	j := newJob(r, rp, src, rp.tr.nextSeq())
	rp.tr.push(0, 0, j)
	j.route, j.kind = route, route.Kind
	j.msg.Context, j.msg.Aggregate, j.msg.Kind = route.Context, route.Aggregate, route.Kind
	j.local, j.redriven, j.decided = w, true, decided
	rp.mu.Unlock()
	// Its attempts run where the aggregate's run: a Blocker's on the
	// blocking pool, not on the action's goroutine.
	if j.place = place; place == (executor.Resume{}) {
		j.Run(executor.Resume{})
	} else {
		place.Again(func() { j.Run(executor.Resume{}) }, j.drop)
	}
	<-w.done
	return w.outcome, w.fail
}

// parkByHand parks an aggregate that is not parked, as asked: its state
// goes to the state topic with its head at the end of its parked
// partition, and its later messages park behind it. It runs as a task of
// the aggregate's mailbox: its earlier messages are done, its later ones
// wait for it. from is the entry of the aggregate, parked, that maybeAct
// started the request from (the request came after the aggregate parked:
// maybeAct marks the entry busy), or nil.
func (r *Receiver) parkByHand(p *partition, k parkKey, from *parkedAgg, req park.Request) {
	ps := r.park
	at := []zap.Field{zap.String("action", req.Action), zap.String("by", req.By), zap.String("topic", k.topic),
		zap.Int32("partition", p.partition), zap.String("aggregate", k.key)}
	defer r.handParkEnded(k, p, req)
	if _, parked := r.parkedAgg(k.topic, k.key); parked {
		// Parked already: this request is void, but not the ones asked
		// before it (a redrive asked while an action ran): it deletes only
		// itself, and the tail, reading that, acts on the one before.
		ps.mu.RLock()
		keys := ps.book.RequestKeys(k.topic, k.key, req.ID)
		ps.mu.RUnlock()
		if len(keys) > 0 {
			tomb := &kgo.Record{Topic: r.o.Park.StateTopic, Key: []byte(keys[len(keys)-1])}
			if err := r.produceDurably(p, tomb); err != nil {
				r.log.Warn("deleting a request to park an aggregate parked already; the next owner of the partition looks at it again", zap.String("aggregate", k.key), zap.Error(err))
			}
		}
		r.parkIdle(k, from) // the request before it, if any, starts once the tail reads the delete
		return
	}
	if int(r.nparked.Load()+r.parkSlots.Load()) >= r.o.Park.Max {
		r.log.Warn("parking by hand refused: max-parked reached", at...)
		r.m.ParkAction(req.Action, "failed")
		r.endRequest(p, k, from, req)
		return
	}
	parked := park.Topic(k.topic)
	ends, err := park.Ends(p.ctx, kadm.NewClient(r.cl), parked, false)
	if err != nil || len(ends) == 0 {
		if p.ctx.Err() != nil {
			r.actionCanceled(k, from, req.Action, at)
			return
		}
		r.log.Error("parking by hand: the parked topic's end is not known; ask again", append(at, zap.Error(err))...)
		r.m.ParkAction(req.Action, "failed")
		r.endRequest(p, k, from, req)
		return
	}
	// Where the client puts the aggregate's parked messages: the default
	// partitioner hashes the key over the parked topic's partitions.
	head := kgo.StickyKeyPartitioner(nil).ForTopic(parked).Partition(&kgo.Record{Key: []byte(k.key)}, len(ends))
	below, open := resolvedBelow(p, k.key)
	if !open {
		// Closed while the parked topic's end was read (lost, revoked
		// past its drain, rewound, stopping): its queued records were
		// dropped, so no bound can be told. The request stays for the
		// partition's next owner (after a rewind, the next incarnation).
		r.actionCanceled(k, from, req.Action, at)
		return
	}
	st := park.State{
		Service: r.o.Service, Dispatcher: r.o.Dispatcher, Topic: k.topic, Partition: p.partition, Offset: below,
		Aggregate: k.key, Head: park.Position{Partition: int32(head), Offset: ends[int32(head)]},
		Since: time.Now(), Class: park.ClassByHand, Reason: "parked by hand by " + req.By, Epoch: p.parkEpoch.Load(),
	}
	if err := r.produceDurably(p, stateRecord(r.o.Park.StateTopic, &st)); err != nil {
		r.actionCanceled(k, from, req.Action, at)
		return
	}
	a := &parkedAgg{state: st, lastReq: req.ID}
	if r.lockKeepsParking(p, st.Epoch) {
		ps.parked[k] = a
		r.nparked.Store(int32(len(ps.parked)))
	}
	ps.mu.Unlock()
	r.m.ParkAction(req.Action, "done")
	r.log.Warn("aggregate parked by hand: its next messages wait in the parked topic for wowd parked redrive|skip|discard", at...)
	r.endRequest(p, k, a, req)
}

// resolvedBelow returns the source offset of p below which the aggregate
// id's records are resolved, for a park by hand running in id's mailbox:
// those the mailbox ran before it. The aggregate's records queued behind it
// are unfinished in p's tracker, and those delivered later come after the
// newest delivered record, so the lowest of those is the bound. A record
// delivered again below it (a rewind, a commit that was behind) is then
// finished as the duplicate it is instead of parked behind the head, and a
// redrive passes over its parked copies. Only an open incarnation has the
// bound: once p closed, its queued records are dropped (and their jobs
// let go by its tracker), so open is false and the bound is not to be
// written.
func resolvedBelow(p *partition, id string) (from int64, open bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed.Load() {
		return -1, false
	}
	from = p.tr.last + 1
	p.tr.jobs(func(j *job) {
		if j.msg.AggregateID == id && j.rec.Offset < from {
			from = j.rec.Offset
		}
	})
	return from, true
}

// ParkByHand asks, in the state topic, for the aggregate id to be parked in
// every topic the receiver consumes that exists, by by; the owner of its
// partition parks it in its mailbox's order. It returns how many it asked
// for. It is PlanParkByHand and then its Ask.
func (r *Receiver) ParkByHand(ctx context.Context, id, by string) (int, error) {
	plan, err := r.PlanParkByHand(ctx, id)
	if err != nil {
		return 0, err
	}
	return plan.Ask(ctx, by)
}

// HandPark is what a park by hand asks for on one receiver: a state per
// topic that exists, at the partition the aggregate's key hashes to.
type HandPark struct {
	r      *Receiver
	states []park.State
}

// PlanParkByHand lists the receiver's topics and returns the requests a
// park by hand of id would write, without writing them. A topic that could
// not be listed for another reason than not existing (not authorized, no
// leader) is an error: answering as if the aggregate would park while one
// of its topics went on handling its messages would mislead the operator.
// A caller parking on several receivers plans on all of them first, so
// that such an error asks for nothing anywhere.
func (r *Receiver) PlanParkByHand(ctx context.Context, id string) (HandPark, error) {
	if r.park == nil {
		return HandPark{}, nil
	}
	// A metadata request of its own, not kadm's listing, which answers
	// from the client's cache (up to 5 s old): partitions added since
	// would move the aggregate's key.
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = false
	for _, t := range r.topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, r.cl)
	if err != nil {
		return HandPark{}, fmt.Errorf("listing the topics of %s: %w", id, err)
	}
	listed := make(map[string]kmsg.MetadataResponseTopic, len(resp.Topics))
	for _, t := range resp.Topics {
		if t.Topic != nil {
			listed[*t.Topic] = t
		}
	}
	var errs []error
	plan := HandPark{r: r}
	for _, t := range r.topics {
		td, ok := listed[t]
		terr := kerr.ErrorForCode(td.ErrorCode)
		switch {
		case ok && terr != nil && !errors.Is(terr, kerr.UnknownTopicOrPartition):
			errs = append(errs, fmt.Errorf("listing topic %s: %w", t, terr))
		case !ok || terr != nil || len(td.Partitions) == 0:
		default:
			p := kgo.StickyKeyPartitioner(nil).ForTopic(t).Partition(&kgo.Record{Key: []byte(id)}, len(td.Partitions))
			plan.states = append(plan.states, park.State{Service: r.o.Service, Dispatcher: r.o.Dispatcher, Topic: t, Partition: int32(p), Aggregate: id})
		}
	}
	if len(errs) > 0 {
		// One line (errors.Join's would break the admin API's answer),
		// each error still matched by errors.Is.
		args := []any{id}
		for _, err := range errs {
			args = append(args, err)
		}
		return HandPark{}, fmt.Errorf("nothing asked for %s: "+strings.TrimSuffix(strings.Repeat("%w; ", len(errs)), "; "), args...)
	}
	return plan, nil
}

// Topics is how many topics the plan asks on.
func (p HandPark) Topics() int { return len(p.states) }

// Ask writes the plan's requests, by by, and returns how many it wrote.
func (p HandPark) Ask(ctx context.Context, by string) (int, error) {
	for i := range p.states {
		if err := park.Ask(ctx, p.r.cl, p.r.o.Park.StateTopic, &p.states[i], park.Park, by); err != nil {
			return i, err
		}
	}
	return len(p.states), nil
}
