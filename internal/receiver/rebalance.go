package receiver

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// onAssigned starts a new incarnation of every assigned partition. kgo calls
// it before fetching the partitions, and with an empty map at the start of
// every group session: the receiver is a member again.
func (r *Receiver) onAssigned(_ context.Context, cl *kgo.Client, assigned map[string][]int32) {
	r.joined.Store(true)
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

// onRevoked drains the revoked partitions within RevokeTimeout, commits
// their watermarks and lets them go. Called with an empty map at the end of
// a group session, where it flushes commits. kgo calls onAssigned after
// every revoke but the one of leaving the group, even with nothing new.
func (r *Receiver) onRevoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	// Set before taking commitMu: a periodic commit that takes it after
	// this revoke returned must not run into the join that follows.
	r.rebalancing.Store(true)
	r.revoking.Add(1)
	defer r.revoking.Add(-1)
	r.commitMu.lock()
	defer r.commitMu.unlock()
	gone := r.take(revoked)
	for _, p := range gone {
		r.retire(p) // owned no more, but its tries are held to their deadline while it drains
	}
	if len(gone) > 0 && !r.closing.Load() {
		r.drain(gone)
	}
	if !r.closing.Load() {
		// Commit everything owned now, the revoked partitions included:
		// this is the last chance for the revoked ones. While stopping, no
		// later than the stop's deadline.
		ctx, cancel := context.WithCancel(ctx)
		defer context.AfterFunc(r.stopExpired, cancel)()
		defer cancel()
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

// recheckShares wakes the poll loop after the number of assigned partitions
// changed: the shares changed (a partition alone may hold the whole window),
// so held records may go in.
func (r *Receiver) recheckShares() { r.notify() }

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
