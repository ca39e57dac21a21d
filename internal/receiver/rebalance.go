package receiver

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// onAssigned starts a new incarnation of every assigned partition. kgo calls
// it before fetching the partitions, and with an empty map at the start of
// every group session: the receiver is a member again.
func (r *Receiver) onAssigned(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) {
	// kgo fetches the partitions once this returns: not with the limits
	// the client was made with (New closes fitted right after sizing them).
	<-r.fitted
	assigned = r.retake(ctx, cl, assigned) // while commits still wait (rebalancing)
	r.joined.Store(true)
	r.noTopics.Store(nil) // joined: a topic exists; a later loss of membership has another cause
	r.rebalancing.Store(false)
	select {
	case r.assignedSig <- struct{}{}:
	default:
	}
	var fresh []*partition
	r.partsMu.Lock()
	for topic, ps := range assigned {
		for _, p := range ps {
			k := tp{topic, p}
			if old := r.parts[k]; old != nil {
				r.closePartition(old) // a loss we were not told about
			}
			np := newPartition(topic, p)
			np.member = r.member // retake made it the session's
			r.parts[k] = np
			fresh = append(fresh, np)
		}
	}
	r.nparts.Store(int32(len(r.parts)))
	r.partsMu.Unlock()
	r.assignedParking(cl, fresh)
	n := len(fresh)
	if n > 0 {
		r.m.Assigned(n)
		r.log.Info("partitions assigned", zap.Any("partitions", assigned))
	}
}

// retake takes again the partitions kgo kept across a membership the
// coordinator ended, and returns them with assigned.
//
// A member the coordinator dropped (its session expired while it was cut
// off, or while a revoke of its took long) joins again under a new member
// ID. With the cooperative protocol kgo may keep fetching the partitions
// the member owned before, and report only the new ones as assigned, when
// the session ended in a rebalance of its own and the dropped member's
// error came while kgo waited for that revoke: its onLost is never
// called. Yet another member may have owned those partitions meanwhile,
// handled and committed their records and parked aggregates at a higher
// owner epoch; what this member holds of them is stale (its parked
// aggregates, its epoch, its records in flight or held), and handling on
// from it let an aggregate parked meanwhile run past its parked messages
// (found by the simulation, seed 4676). So they are let go as lost,
// without a commit, and taken again as new ones: with the parked
// aggregates loaded again, at a new epoch, from the offset a new owner
// starts at (see restartOffsets). (The partitions kgo revokes at the start
// of such a session are let go the same way: see onRevoked.)
func (r *Receiver) retake(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) map[string][]int32 {
	member, _ := cl.GroupMetadata()
	prev := r.member
	r.member = member
	if prev == "" || member == prev {
		return assigned
	}
	kept := map[string][]int32{}
	r.partsMu.RLock()
	for k := range r.parts {
		if !slices.Contains(assigned[k.topic], k.partition) {
			kept[k.topic] = append(kept[k.topic], k.partition)
		}
	}
	r.partsMu.RUnlock()
	if len(kept) == 0 {
		return assigned
	}
	r.log.Warn("the group coordinator had dropped this member, and the Kafka client kept partitions another member may have owned meanwhile: taking them again from the group's committed offsets",
		zap.String("member_id", member), zap.String("previous_member_id", prev), zap.Any("partitions", kept))
	r.commitMu.lock()
	gone := r.take(kept)
	// Where each incarnation's own unfinished work begins: everything below
	// its watermark finished here; without one, where it started fetching;
	// -1: it fetched nothing, the client is where it started it.
	own := make(map[tp]int64, len(gone))
	for _, p := range gone {
		p.mu.Lock()
		own[tp{p.topic, p.partition}] = p.fetched
		if next, _, ok := p.tr.watermark(); ok {
			own[tp{p.topic, p.partition}] = next
		}
		p.mu.Unlock()
		r.closePartition(p)
	}
	r.unloadParked(gone)
	r.commitMu.unlock()
	r.m.Lost(len(gone))
	// The reads hold kgo's assign callback, and with it a Stop waiting for
	// the poll loop: no longer than the stop's deadline.
	ctx, cancel := context.WithCancel(ctx)
	defer context.AfterFunc(r.stopExpired, cancel)()
	defer cancel()
	if from := r.restartOffsets(ctx, cl, kept, own); len(from) > 0 {
		cl.SetOffsets(from)
	}
	all := maps.Clone(assigned)
	if all == nil {
		all = make(map[string][]int32)
	}
	for topic, ps := range kept {
		all[topic] = append(slices.Clone(all[topic]), ps...)
	}
	return all
}

// restartOffsets returns where the partitions taken again by retake
// restart: at the group's committed offset, as for any new owner (what is
// below it was finished, by this member or another); where the group
// committed nothing, at own, the incarnation's floor (its watermark, else
// the first offset it fetched: where the start offset put it; below it
// nothing was left unfinished here), or, where it fetched nothing, where
// the client is (a new owner under start-offset latest would not begin at
// the log's start either); and, where Kafka cannot say, at this member's
// last committed offset, else at own. It reads for up to half a minute; a
// partition none of these covers keeps its position, logged as an error.
// Reads that fail once the receiver stops admitting (Stop's deadline cuts
// them) set nothing.
func (r *Receiver) restartOffsets(ctx context.Context, cl *kgo.Client, ps map[string][]int32, own map[tp]int64) map[string]map[int32]kgo.EpochOffset {
	from := make(map[string]map[int32]kgo.EpochOffset)
	set := func(topic string, p int32, o int64) {
		if from[topic] == nil {
			from[topic] = make(map[int32]kgo.EpochOffset)
		}
		from[topic][p] = kgo.EpochOffset{Epoch: -1, Offset: o}
	}
	adm := kadm.NewClient(cl)
	var committed kadm.OffsetResponses
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		committed, err = adm.FetchOffsets(actx, r.o.GroupID)
		if err == nil {
			err = committed.Error()
		}
		cancel()
		if err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil && r.stopping.Load() {
		// Cut by the stop (or failing while it runs): admission has
		// stopped, so nothing polled from these partitions is handled
		// whatever their position, and no fallback (nor its warnings) is
		// needed.
		r.log.Info("stopping: the partitions taken again are not read from anywhere", zap.Any("partitions", ps), zap.Error(err))
		return nil
	}
	if err != nil {
		r.log.Warn("reading where the partitions taken again restart; they restart from this member's last commit, or below what it held unfinished", zap.Error(err))
		for topic, m := range cl.CommittedOffsets() {
			for p, o := range m {
				if slices.Contains(ps[topic], p) && o.Offset >= 0 {
					set(topic, p, o.Offset)
				}
			}
		}
		for k, o := range own {
			if _, ok := from[k.topic][k.partition]; !ok && o >= 0 {
				set(k.topic, k.partition, o)
			}
		}
	} else {
		for topic, parts := range ps {
			for _, p := range parts {
				if o, ok := committed.Lookup(topic, p); ok && o.At >= 0 {
					set(topic, p, o.At)
				} else if o := own[tp{topic, p}]; o >= 0 {
					set(topic, p, o) // its watermark, or where the start offset put it
				} // else nothing fetched: the client is where the start offset put it

			}
		}
	}
	for topic, parts := range ps {
		for _, p := range parts {
			if _, ok := from[topic][p]; !ok && own[tp{topic, p}] >= 0 {
				r.log.Error("no offset to take a partition again from; it goes on from where the client is, and records this member held unfinished may be skipped",
					zap.String("topic", topic), zap.Int32("partition", p))
			}
		}
	}
	return from
}

// onRevoked drains the revoked partitions within RevokeTimeout, commits
// their watermarks and lets them go. Called with an empty map at the end of
// a group session, where it flushes commits. kgo calls onAssigned after
// every revoke but the one of leaving the group, even with nothing new.
func (r *Receiver) onRevoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	if member, _ := cl.GroupMetadata(); len(revoked) > 0 && r.member != "" && member != "" && member != r.member {
		// kgo revokes, at the start of a session under a new member ID
		// (the coordinator had dropped this member, see retake), what the
		// dropped membership owned and the new one does not get: another
		// member may have owned it meanwhile, so it is not drained and
		// committed from this member's stale state, but let go as lost.
		r.log.Warn("the group coordinator had dropped this member: partitions it still held are let go as lost",
			zap.String("member_id", member), zap.String("previous_member_id", r.member))
		r.onLost(ctx, cl, revoked)
		return
	}
	// Set before taking commitMu: a periodic commit that takes it after
	// this revoke returned must not run into the join that follows.
	// revoking first: a stop that sees rebalancing set by a revoke must
	// see the revoke too, or it would take the revoke for a join and skip
	// its final commit (see stop).
	r.revoking.Add(1)
	r.rebalancing.Store(true)
	r.commitMu.lock()
	defer r.commitMu.unlock()
	// Uncounted before commitMu is let go (defers run last first): a stop
	// that takes commitMu next must not take this finished revoke for one
	// still waiting for the lock, and commit into the join that follows.
	defer r.revoking.Add(-1)
	gone := r.take(revoked)
	for _, p := range gone {
		r.retire(p) // owned no more, but its tries are held to their deadline while it drains
	}
	if len(gone) > 0 && !r.closing.Load() {
		r.drain(gone)
	}
	if !r.closing.Load() {
		// Commit everything owned now, the revoked partitions included:
		// this is the last chance for the revoked ones. Not cut short by
		// the stop's deadline (the drain was): a stop that finds this
		// revoke's join under way skips its own final commit, so this one
		// is it, and has commitParts' commitTimeout as the stop's has.
		if err := r.commitParts(ctx, append(r.active(), gone...)); err != nil {
			r.log.Warn("commit on revoke", zap.Error(err))
		}
	}
	for _, p := range gone {
		r.closePartition(p)
	}
	r.unloadParked(gone)
	r.recheckShares()
	if len(gone) > 0 {
		r.m.Revoked(len(gone))
		r.log.Info("partitions revoked", zap.Any("partitions", revoked))
	}
}

// onLost lets lost partitions go without committing: another member may
// own them already. kgo calls it whenever the group session ended in an
// error: the receiver is not a member until its next assignment.
func (r *Receiver) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	r.joined.Store(false)
	r.rebalancing.Store(true)
	r.commitMu.lock()
	defer r.commitMu.unlock()
	gone := r.take(lost)
	for _, p := range gone {
		r.closePartition(p)
	}
	r.unloadParked(gone)
	r.recheckShares()
	if len(gone) > 0 {
		r.m.Lost(len(gone))
		r.log.Warn("partitions lost; their unfinished records will be redelivered", zap.Any("partitions", lost))
	}
}

// take removes the incarnations of m from the owned set. Called with
// commitMu held.
func (r *Receiver) take(m map[string][]int32) []*partition {
	var gone []*partition
	r.partsMu.Lock()
	for topic, ps := range m {
		for _, p := range ps {
			k := tp{topic, p}
			if inc := r.parts[k]; inc != nil {
				gone = append(gone, inc)
				delete(r.parts, k)
			}
		}
	}
	r.nparts.Store(int32(len(r.parts)))
	r.partsMu.Unlock()
	return gone
}

// active returns the owned incarnations.
func (r *Receiver) active() []*partition {
	r.partsMu.RLock()
	defer r.partsMu.RUnlock()
	ps := make([]*partition, 0, len(r.parts))
	for _, p := range r.parts {
		ps = append(ps, p)
	}
	return ps
}

// recheckShares follows a change of the partitions' shares (the number of
// assigned partitions changed: a partition alone may hold the whole
// window) or of what takes them (an operator's action ended): a partition
// that gave its held records back fetches again if it is now within half
// its share (a larger share lifts its pause without any decrement), and
// the poll loop wakes, so that held records may go in.
func (r *Receiver) recheckShares() {
	r.partsMu.RLock()
	for _, p := range r.parts {
		p.mu.Lock()
		r.liftShareLocked(p, p.pending.Load())
		p.mu.Unlock()
	}
	r.partsMu.RUnlock()
	r.notify()
}

// drain waits until the partitions have no unfinished records, or the revoke
// deadline passes (the stop's deadline, if that comes first).
func (r *Receiver) drain(ps []*partition) {
	ctx, cancel := context.WithTimeout(r.stopExpired, r.o.RevokeTimeout)
	defer cancel()
	left := func() (n int64) {
		for _, p := range ps {
			n += p.pending.Load()
		}
		return n
	}
	if r.changed.Wait(ctx, func() bool { return left() == 0 }) != nil {
		r.log.Warn("revoke deadline passed; dropping unfinished records, the next owner gets them again",
			zap.Int64("records", left()), zap.Duration("revoke_timeout", r.o.RevokeTimeout))
	}
}
