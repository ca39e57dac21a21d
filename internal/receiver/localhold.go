package receiver

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// Local holds keep the order of an aggregate's ingested messages when one
// of them goes through Kafka instead of being handled here. A local
// (ingest) record given up — its aggregate parked or not known not to be,
// its handler failing for good, the receiver stopping — is published
// unmarked for this receiver's dispatcher, and the owner of its partition
// handles it from Kafka, perhaps much later. The aggregate's later local
// records must not be handled here before it: from the give-up on, they
// are given up too, and so reach the handler through the owner, in order.
// The ingest then tells where the copy went (Admitted.Published; or that it
// was not published, Admitted.NotPublished), and the hold lasts until the
// group's committed offset shows every such copy finished (handled,
// dead-lettered or parked) and, with parking, the state topic has been
// read past that point, so that an aggregate the owner parked is seen
// parked here. A receiver that never took the record (Admit refused) is
// told too, from the refusal on (Receiver.Refused, then Published).
//
// Holds are kept by a hash of the aggregate in holdBuckets buckets, so
// their memory is bounded however many aggregates are held: another
// aggregate of a held bucket is held too (it goes through Kafka, which is
// slower, never out of order).
//
// A process does not know the copies an earlier one gave up (a restart):
// until the ends the topics had when the receiver started are read (by
// watchHolds), every local record is given up; then, until the group's
// committed offset of a partition reaches its end (the start barrier),
// the local records of the aggregates whose messages go to that
// partition. The partition is the one Kafka's default partitioner (and
// franz-go's, which the ingest uses) picks for the key among the
// partitions the topic had at start, where an earlier process's copies
// went. A partition the group does not move past (quiet) holds only its
// own aggregates, and the first such message given up goes there and
// moves it on.

// holdBuckets is the number of buckets the held aggregates hash to.
const holdBuckets = 8192

// holdCheck is how often the committed offsets are read while copies are
// waited for.
const holdCheck = 200 * time.Millisecond

// localHolds are the aggregates with a local record given up here whose
// copy in Kafka is not known finished yet, by bucket, and the start
// barrier.
type localHolds struct {
	seed maphash.Seed
	mu   sync.Mutex // guards buckets, held, barrier, parts and barrierRead. A leaf (localWait.mu may be held above it).
	// buckets: records given up whose copies are not reported yet, and the
	// last copy per partition to wait for, of the aggregates hashing to
	// each.
	buckets [holdBuckets]hold
	held    int // buckets holding anything
	// barrier is, per partition, the last offset at start, until the
	// group's committed offset is past it; barrierRead is set once the
	// ends were read (until then every local record is held).
	barrier     map[tp]int64
	barrierRead bool
	// parts are, per topic, its partition count at start and the
	// partitioner that places a key among them (for the barrier).
	parts map[string]topicParts
	wake  chan struct{} // capacity 1: a copy was added
}

// topicParts is a topic's partition count at start and its partitioner.
type topicParts struct {
	n   int
	key kgo.TopicPartitioner
}

// hold is one bucket's.
type hold struct {
	pending int
	copies  []tpOffset
}

func (e *hold) empty() bool { return e.pending == 0 && len(e.copies) == 0 }

// tpOffset is a copy's position.
type tpOffset struct {
	tp
	offset int64
}

// newLocalHolds returns the holds of a receiver; without ingest nothing is
// ever admitted locally, so there is no start barrier to read (nothing
// waits for one).
func newLocalHolds(ingest bool) *localHolds {
	return &localHolds{seed: maphash.MakeSeed(), barrier: make(map[tp]int64), wake: make(chan struct{}, 1), barrierRead: !ingest}
}

// bucket returns the bucket of the aggregate. h.mu held.
func (h *localHolds) bucket(topic, key string) *hold {
	var mh maphash.Hash
	mh.SetSeed(h.seed)
	mh.WriteString(topic)
	mh.WriteByte(0)
	mh.WriteString(key)
	return &h.buckets[mh.Sum64()%holdBuckets]
}

// change runs fn on the aggregate's bucket, keeping held up to date.
func (h *localHolds) change(topic, key string, fn func(e *hold)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.bucket(topic, key)
	was := !e.empty()
	fn(e)
	switch now := !e.empty(); {
	case now && !was:
		h.held++
	case was && !now:
		h.held--
	}
}

// gaveUp holds the aggregate of a local record given up here until its
// copy is reported (published, then finished; or not published).
func (r *Receiver) gaveUp(topic, key string) {
	r.holds.change(topic, key, func(e *hold) { e.pending++ })
}

// published records a copy of a local record of the aggregate at partition
// and offset, which the owner of that partition handles, in place of the
// record given up here (counted by gaveUp).
func (r *Receiver) published(topic, key string, partition int32, offset int64) {
	h := r.holds
	unmatched := false
	h.change(topic, key, func(e *hold) {
		unmatched = e.pending == 0
		if !unmatched {
			e.pending--
		}
		e.copies = later(e.copies, tp{topic, partition}, offset)
	})
	if unmatched {
		r.unmatchedReport(topic, key)
	}
	r.log.Debug("local-first: a copy not handled here waits for the owner of its partition; later ingested messages of its aggregate are given up too until it is handled",
		zap.String("topic", topic), zap.String("aggregate", key), zap.Int32("partition", partition), zap.Int64("offset", offset))
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// notPublished forgets a local record given up here whose copy was not
// published: nothing waits for it.
func (r *Receiver) notPublished(topic, key string) {
	unmatched := false
	r.holds.change(topic, key, func(e *hold) {
		unmatched = e.pending == 0
		if !unmatched {
			e.pending--
		}
	})
	if unmatched {
		r.unmatchedReport(topic, key)
	}
}

// unmatchedReport logs a copy reported for an aggregate whose bucket
// counts no record given up: each give-up is reported exactly once
// (localWait, and the ingest's tell), so this is a defect; had the bucket
// held another aggregate's give-up, that one would have been released
// before its copy was known finished.
func (r *Receiver) unmatchedReport(topic, key string) {
	r.log.Error("local-first: a copy was reported for an aggregate with no record given up here; please report this defect",
		zap.String("topic", topic), zap.String("aggregate", key))
}

// Refused tells the receiver that the ingest will publish a copy of a
// record of topic and aggregate key that this receiver did not take (Admit
// refused it, or was not asked): the owner of its partition handles it, so
// from now on the aggregate's local records are given up here, until the
// copy is known finished. Published or NotPublished must follow.
func (r *Receiver) Refused(topic, key string) { r.gaveUp(topic, key) }

// Published tells the receiver where the copy of a record it refused
// (Refused) was published: the aggregate stays held until the copy is
// known finished.
func (r *Receiver) Published(topic, key string, partition int32, offset int64) {
	r.published(topic, key, partition, offset)
}

// NotPublished tells the receiver that the copy of a record it refused
// (Refused) was not published: nothing is to wait for.
func (r *Receiver) NotPublished(topic, key string) { r.notPublished(topic, key) }

// later returns ps with offset as the copy to wait for in its partition.
func later(ps []tpOffset, at tp, offset int64) []tpOffset {
	for i := range ps {
		if ps[i].tp == at {
			ps[i].offset = max(ps[i].offset, offset)
			return ps
		}
	}
	return append(ps, tpOffset{at, offset})
}

// heldLocally reports whether a local record of the aggregate must be
// given up: an earlier one (or one of another aggregate of its bucket)
// was given up here and its copy may not be finished, or the start
// barrier stands for its partition.
func (r *Receiver) heldLocally(topic, key string) bool {
	h := r.holds
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.barrierRead || h.barrierHolds(topic, key) || !h.bucket(topic, key).empty()
}

// barrierHolds reports whether the start barrier stands for the partition
// the aggregate's messages go to. h.mu held.
func (h *localHolds) barrierHolds(topic, key string) bool {
	if len(h.barrier) == 0 {
		return false
	}
	p, ok := h.partitionOf(topic, key)
	if !ok {
		return false // the topic had no partition at start: nothing below
	}
	_, waits := h.barrier[tp{topic, p}]
	return waits
}

// partitionOf returns the partition the aggregate's messages go to, among
// the partitions its topic had at start; false if the topic had none or
// they are not read yet. h.mu held.
func (h *localHolds) partitionOf(topic, key string) (int32, bool) {
	tps, ok := h.parts[topic]
	if !ok {
		return 0, false
	}
	return int32(tps.key.Partition(&kgo.Record{Topic: topic, Key: []byte(key)}, tps.n)), true
}

// mayOwnPartitionOf reports whether the receiver may own the partition the
// aggregate's messages go to: it owns it now, or which one it is is not
// known.
func (r *Receiver) mayOwnPartitionOf(topic, key string) bool {
	h := r.holds
	h.mu.Lock()
	p, ok := h.partitionOf(topic, key)
	h.mu.Unlock()
	if !ok {
		return true
	}
	r.partsMu.RLock()
	defer r.partsMu.RUnlock()
	return r.parts[tp{topic, p}] != nil
}

// count returns the buckets held, and whether the start barrier stands for
// any partition.
func (h *localHolds) count() (int, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held, !h.barrierRead || len(h.barrier) > 0
}

// waiting reports whether any copy, or the barrier, is waited for.
func (h *localHolds) waiting() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.barrier) > 0 {
		return true
	}
	for i := range h.buckets {
		if len(h.buckets[i].copies) > 0 {
			return true
		}
	}
	return false
}

// setBarrier sets the start barrier: ends are the topics' end offsets at
// start, by partition, every partition of each topic listed.
func (h *localHolds) setBarrier(ends map[tp]int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.parts = make(map[string]topicParts)
	for at, end := range ends {
		tps := h.parts[at.topic]
		if tps.key == nil {
			tps.key = keyPartitioner.ForTopic(at.topic)
		}
		tps.n++
		h.parts[at.topic] = tps
		if end > 0 {
			h.barrier[at] = end - 1
		}
	}
	h.barrierRead = true
}

// keyPartitioner places a keyed record as Kafka's default partitioner does
// (murmur2 of the key, modulo the partitions), as franz-go's default one,
// which the ingest's producer uses, does for a keyed record.
var keyPartitioner = kgo.StickyKeyPartitioner(nil)

// release forgets the copies that committed says are finished: committed
// returns a partition's committed offset (the next to handle), and false
// where there is none. It returns the start barrier's partitions still
// waited for, and the offset each waits past.
func (h *localHolds) release(committed func(topic string, partition int32) (int64, bool)) (barrier []tpOffset) {
	done := func(at tp, offset int64) bool {
		c, ok := committed(at.topic, at.partition)
		return ok && c > offset
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range h.buckets {
		e := &h.buckets[i]
		if len(e.copies) == 0 {
			continue
		}
		left := e.copies[:0]
		for _, c := range e.copies {
			if !done(c.tp, c.offset) {
				left = append(left, c)
			}
		}
		e.copies = left
		if e.empty() {
			e.copies = nil
			h.held--
		}
	}
	for at, o := range h.barrier {
		if done(at, o) {
			delete(h.barrier, at)
		} else {
			barrier = append(barrier, tpOffset{at, o})
		}
	}
	return barrier
}

// watchHolds releases the copies waited for once the group's committed
// offsets pass them (and, with parking, the state topic was read past
// that). It runs from Start until holdStop is closed.
func (r *Receiver) watchHolds() {
	defer close(r.holdDone)
	if !r.o.Ingest {
		<-r.holdStop // nothing is admitted locally: nothing to watch
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-r.holdStop:
			cancel()
		case <-ctx.Done():
		}
	}()
	adm := kadm.NewClient(r.cl)
	t := time.NewTimer(holdCheck)
	defer t.Stop()
	for attempt := 1; ; attempt++ {
		err := r.readBarrier(ctx, adm)
		if err == nil {
			break
		}
		if attempt == 1 || attempt%50 == 0 {
			r.log.Warn("local-first: reading the topics' end offsets at start; ingested messages are given up here (handled from Kafka) until they are read", zap.Error(err))
		}
		if sleepCtx(ctx, holdCheck) != nil {
			return
		}
	}
	var (
		failing   int          // consecutive rounds that could not read the committed offsets
		barrierAt = time.Now() // when the start barrier was read
		warned    time.Time    // when a standing barrier was last warned of
	)
	for {
		if r.holds.waiting() {
			t.Reset(holdCheck)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		} else {
			select {
			case <-ctx.Done():
				return
			case <-r.holds.wake:
				continue // look again: waiting now, wait a round first
			}
		}
		standing, err := r.releaseHolds(ctx, adm)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			// Every hold, and the barrier, stays while this fails: said
			// after 5 s of it, then every 30 s.
			if failing++; failing == 25 || failing%150 == 0 {
				r.log.Warn("local-first: cannot read the group's committed offsets (or, with parking, the parked state); ingested messages of the aggregates held here keep going through Kafka",
					zap.Int("rounds", failing), zap.Error(err))
			}
			continue
		}
		failing = 0
		if len(standing) > 0 && time.Since(barrierAt) > barrierPatience && time.Since(warned) > 5*barrierPatience {
			warned = time.Now()
			r.log.Info("local-first: the start barrier still stands for some partitions: ingested messages of the aggregates on them go through Kafka until the group has committed past where they ended when this receiver started (a quiet partition until its next record)",
				zap.Duration("since", time.Since(barrierAt).Round(time.Second)), zap.Int("partitions", len(standing)), zap.Strings("waiting", describe(standing, 5)))
		}
	}
}

// barrierPatience is how long the start barrier may stand before a log line
// says which partitions keep it (a variable for tests).
var barrierPatience = time.Minute

// describe lists up to n partitions with the offset each waits past.
func describe(ps []tpOffset, n int) []string {
	var out []string
	for _, p := range ps[:min(n, len(ps))] {
		out = append(out, fmt.Sprintf("%s/%d past %d", p.topic, p.partition, p.offset))
	}
	return out
}

// readBarrier reads the end offsets of the receiver's topics, the start
// barrier: copies an earlier process gave up are below them.
func (r *Receiver) readBarrier(ctx context.Context, adm *kadm.Client) error {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	listed, err := adm.ListEndOffsets(rctx, r.topics...)
	if err != nil {
		return err
	}
	ends := make(map[tp]int64)
	unknown := make(map[string]bool)
	var errs []error
	listed.Each(func(o kadm.ListedOffset) {
		switch {
		case errors.Is(o.Err, kerr.UnknownTopicOrPartition): // nothing published to it yet
			unknown[o.Topic] = true
		case o.Err != nil:
			errs = append(errs, fmt.Errorf("%s/%d: %w", o.Topic, o.Partition, o.Err))
		default:
			ends[tp{o.Topic, o.Partition}] = o.Offset
		}
	})
	for at := range ends {
		if unknown[at.topic] {
			// Every partition is needed to place a key among them.
			errs = append(errs, fmt.Errorf("%s: some partitions unknown, others listed", at.topic))
			delete(unknown, at.topic)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	r.holds.setBarrier(ends)
	return nil
}

// releaseHolds reads the group's committed offsets and releases the copies
// they show finished, once the parked state is read past them. It returns
// the start barrier's partitions still waited for.
func (r *Receiver) releaseHolds(ctx context.Context, adm *kadm.Client) ([]tpOffset, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	offs, err := adm.FetchOffsets(rctx, r.o.GroupID)
	if err == nil {
		err = offs.Error()
	}
	if err != nil {
		return nil, err
	}
	if r.park != nil {
		// The owner writes an aggregate's parked state before it commits
		// past the message it parked: read the state topic up to now, so
		// that such an aggregate is seen parked (parkedAnywhere) before
		// its hold goes.
		if err := r.park.tail.CaughtUp(rctx); err != nil {
			return nil, err
		}
	}
	return r.holds.release(func(topic string, partition int32) (int64, bool) {
		o, ok := offs.Lookup(topic, partition)
		if !ok || o.Err != nil || o.At < 0 {
			return 0, false
		}
		return o.At, true
	}), nil
}
