package receiver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
)

// commitTimeout bounds one commit round trip.
const commitTimeout = 10 * time.Second

func (r *Receiver) commitLoop() {
	defer close(r.commitDone)
	t := time.NewTicker(r.o.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-r.commitStop:
			return
		case <-t.C:
		}
		if !r.commitMu.tryLock() {
			continue // a revoke or the stop is committing: this tick has nothing to add
		}
		if r.rebalancing.Load() {
			// The group is joining: the revoke committed, and a commit now
			// would wait for the join or fail.
			r.commitMu.unlock()
			continue
		}
		// A revoke or the stop waits for it: no longer than the stop's
		// deadline (commitParts bounds it by commitTimeout otherwise).
		if err := r.commitAll(r.stopExpired); err != nil {
			r.log.Warn("periodic commit", zap.Error(err))
		}
		r.commitMu.unlock()
	}
}

// commitAll commits the watermarks of every owned partition. Called with
// commitMu held.
func (r *Receiver) commitAll(ctx context.Context) error {
	return r.commitParts(ctx, r.active())
}

// uncommitted reports whether an owned partition's watermark moved past
// its last commit: a commit would have something to do.
func (r *Receiver) uncommitted() bool {
	for _, p := range r.active() {
		if _, _, ok := p.toCommit(); ok {
			return true
		}
	}
	return false
}

// toCommit returns p's watermark and its epoch when it moved past p's last
// commit (ok), as a commit would send it; not once p is closed.
func (p *partition) toCommit() (next int64, epoch int32, ok bool) {
	if p.isClosed() {
		return 0, 0, false
	}
	p.mu.Lock()
	next, epoch, ok = p.tr.watermark()
	p.mu.Unlock()
	return next, epoch, ok && next > p.committed.Load()
}

// commitParts commits the watermarks of ps that moved since their last
// commit, synchronously. Called with commitMu held.
func (r *Receiver) commitParts(ctx context.Context, ps []*partition) error {
	offsets := make(map[string]map[int32]kgo.EpochOffset)
	byTP := make(map[tp]*partition)
	for _, p := range ps {
		next, epoch, ok := p.toCommit()
		if !ok {
			continue
		}
		if offsets[p.topic] == nil {
			offsets[p.topic] = make(map[int32]kgo.EpochOffset)
		}
		offsets[p.topic][p.partition] = kgo.EpochOffset{Epoch: epoch, Offset: next}
		byTP[tp{p.topic, p.partition}] = p
	}
	if len(offsets) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, commitTimeout)
	defer cancel()
	var errs []error
	r.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			errs = append(errs, err)
			return
		}
		// From version 10 an answer names its topics by ID only; kgo
		// fills in their names only for a commit of the current
		// generation: read them from the request.
		names := make(map[[16]byte]string, len(req.Topics))
		for _, t := range req.Topics {
			names[t.TopicID] = t.Topic
		}
		answered := make(map[tp]bool, len(byTP))
		for _, t := range resp.Topics {
			topic := t.Topic
			if topic == "" {
				topic = names[t.TopicID]
			}
			for _, rp := range t.Partitions {
				k := tp{topic, rp.Partition}
				p := byTP[k]
				if p == nil {
					continue
				}
				answered[k] = true
				if e := kerr.ErrorForCode(rp.ErrorCode); e != nil {
					errs = append(errs, fmt.Errorf("%s[%d]: %w", topic, rp.Partition, e))
					continue
				}
				p.committed.Store(offsets[topic][rp.Partition].Offset)
			}
		}
		for k := range byTP {
			if !answered[k] {
				errs = append(errs, fmt.Errorf("%s[%d]: no answer to its commit", k.topic, k.partition))
			}
		}
	})
	if len(errs) > 0 {
		r.m.Commit(false)
		return fmt.Errorf("committing offsets: %w", errors.Join(errs...))
	}
	r.m.Commit(true)
	return nil
}

// chanLock is a mutex whose waiters wait on a channel. commitMu is held
// across a revoke's drain and commit round trips, seconds at worst: the
// periodic committer can skip a tick instead of queueing behind it, and a
// waiter is durably blocked in the sense of testing/synctest (a goroutine
// waiting for a sync.Mutex is not, which would stop a simulated clock while
// the holder sleeps).
type chanLock chan struct{}

func (l chanLock) lock()   { l <- struct{}{} }
func (l chanLock) unlock() { <-l }

func (l chanLock) tryLock() bool {
	select {
	case l <- struct{}{}:
		return true
	default:
		return false
	}
}
