package receiver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// lease is how long this member can be sure it is still in its consumer
// group, from what its group coordinator last told it.
//
// A member cut off from Kafka learns that it lost its partitions only when
// it reaches the coordinator again, which may be long after the
// coordinator gave them to another member (kgo retries a heartbeat for up
// to the session timeout, and each dial into a dead network may take its
// whole dial timeout). Meanwhile it still runs handlers (duplicates, which
// at-least-once allows) and it could write parking state: a parked
// aggregate's state written by such a zombie would overwrite the owner's
// and lose the messages parked since. Parking writes are therefore started
// only within the lease. A write started within it that the client keeps
// buffered through a cut can still land late; owner epochs (park.Book)
// make readers pass such a state over.
//
// The coordinator drops a member a session timeout after the last
// heartbeat it received from it, or a rebalance timeout after a rebalance
// began that the member has not rejoined. A group request (heartbeat,
// join, sync) that was answered was received after it was sent; if the
// member was still in the group when the coordinator received it, it is in
// the group at least until its sending plus the shorter timeout. The lease
// ends a quarter of that timeout before, for the writes in flight.
//
// An answer alone does not say that the member was still in the group:
// kgo's hooks give its timing, not its error code, and the coordinator
// answers the heartbeats of a member it dropped too (UNKNOWN_MEMBER_ID).
// kgo reports that loss (onLost, a new member ID) only once the poll loop
// lets a rebalance run, and in the cooperative protocol only after a revoke
// under way ends, while its heartbeats go on, so extending the lease on
// every answer kept a dropped member's lease alive for that long (found by
// review). The lease is therefore extended only by a confirmation: a
// describe of the group, sent to the coordinator after the answer came
// from it, that lists the member (by the member ID kgo held when it was
// sent) and no rebalance under way (classic protocol: the group is Stable;
// consumer protocol: the member's epoch has reached the target
// assignment's, so nothing is waiting to be revoked from it). A member
// listed then was in the group when the answered request reached the
// coordinator (member IDs are never reused), so that request restarted its
// session; a rebalance not under way then can only begin after it, so its
// timeout counts from after the sending too. confirm makes the describes;
// run repeats them.
type lease struct {
	session atomic.Int64 // the group's session timeout, or its rebalance timeout if shorter (ns); 0 until the client is made: no lease
	until   atomic.Int64 // unix nanoseconds; 0 before the first confirmation

	mu       sync.Mutex      // guards answered and consumer. A leaf.
	answered map[int32]int64 // by broker node: the latest sending (unix ns) of a group request it answered
	consumer bool            // the latest group request answered was a ConsumerGroupHeartbeat (KIP-848)

	kick     chan struct{}                 // an answer came while the lease is short: confirm now (capacity 1)
	extended atomic.Pointer[chan struct{}] // closed (and replaced) when a confirmation extends the lease
	now      func() time.Time
}

func newLease() *lease {
	l := &lease{answered: make(map[int32]int64), kick: make(chan struct{}, 1), now: time.Now}
	ch := make(chan struct{})
	l.extended.Store(&ch)
	return l
}

// await returns once the lease holds, ctx ends or d passed, and reports
// whether it holds: a partition assigned as the member joins takes its
// owner epoch as soon as the membership is confirmed, without a warning
// for the moment in between.
func (l *lease) await(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		ch := *l.extended.Load()
		if l.holds() {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		case <-t.C:
			return l.holds()
		}
	}
}

var _ kgo.HookBrokerE2E = (*lease)(nil)

// OnBrokerE2E notes the sending of every answered heartbeat, join or sync
// (of the consumer protocol, KIP-848: its heartbeat), whatever its error
// code: confirm decides what it proves.
func (l *lease) OnBrokerE2E(meta kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	switch kmsg.Key(key) {
	case kmsg.Heartbeat, kmsg.JoinGroup, kmsg.SyncGroup, kmsg.ConsumerGroupHeartbeat:
	default:
		return
	}
	if e2e.Err() != nil {
		return
	}
	sent := l.now().Add(-e2e.DurationE2E()).UnixNano()
	l.mu.Lock()
	l.answered[meta.NodeID] = max(l.answered[meta.NodeID], sent)
	l.consumer = kmsg.Key(key) == kmsg.ConsumerGroupHeartbeat
	l.mu.Unlock()
	// A lease with less than half its length left is confirmed now, not at
	// the next tick: at the start, and after a lapse.
	if session := l.session.Load(); session > 0 && l.until.Load()-l.now().UnixNano() < session/2 {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
}

// end returns when the lease ends (the zero time before the first
// confirmation).
func (l *lease) end() time.Time {
	if n := l.until.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// holds reports whether the lease has not ended.
//
// A write started within the lease is not also cut off when the lease
// ends: kgo keeps a failed record's context for the producer-ID reload
// that follows, and a context canceled after its record failed made every
// later produce of the client fail with it (found by the simulation). So
// a parking write that kgo keeps buffered through a network cut begun
// within the last three quarters of a session can still land after the
// member was dropped; docs/operations.md says so.
func (l *lease) holds() bool { return l.now().Before(l.end()) }

// groupDescriber sends a describe of the group to broker node (the group's
// coordinator) and reports whether it lists member with no rebalance under
// way for it; consumer selects the consumer protocol's describe.
type groupDescriber func(ctx context.Context, node int32, member string, consumer bool) (bool, error)

// confirm asks coordinator (the node kgo takes for the group's
// coordinator) whether member (the member ID kgo holds) is still in the
// group, and if so extends the lease from the latest answered group
// request that coordinator sent before the question. It returns the
// describe's error.
func (l *lease) confirm(ctx context.Context, coordinator int32, member string, describe groupDescriber) error {
	session := l.session.Load()
	if session <= 0 || member == "" {
		return nil
	}
	l.mu.Lock()
	sent, consumer := l.answered[coordinator], l.consumer
	l.mu.Unlock()
	if sent == 0 {
		return nil // nothing answered by this coordinator yet: nothing to confirm
	}
	in, err := describe(ctx, coordinator, member, consumer)
	if err != nil || !in {
		return err
	}
	end := sent + session - session/4
	for {
		cur := l.until.Load()
		if end <= cur || l.until.CompareAndSwap(cur, end) {
			break
		}
	}
	ch := make(chan struct{})
	close(*l.extended.Swap(&ch))
	return nil
}

// interval returns how often run confirms the lease: an eighth of its
// length, at least 50 ms and at most 5 s.
func (l *lease) interval() time.Duration {
	return min(max(time.Duration(l.session.Load())/8, 50*time.Millisecond), 5*time.Second)
}

// run confirms the lease every interval, and at once when an answer comes
// while the lease is short, until ctx ends. Its owner is the receiver's
// parking (startParking starts it, stopParking stops it): only parking
// writes use the lease.
func (l *lease) run(ctx context.Context, cl *kgo.Client, group string, onErr func(error)) {
	describe := func(ctx context.Context, node int32, member string, consumer bool) (bool, error) {
		return describeMember(ctx, cl, group, node, member, consumer)
	}
	t := time.NewTicker(l.interval())
	defer t.Stop()
	var failing error
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-l.kick:
		}
		member, _ := cl.GroupMetadata()
		node, err := coordinator(ctx, cl, group)
		if err == nil {
			dctx, cancel := context.WithTimeout(ctx, max(time.Duration(l.session.Load())/4, time.Second))
			err = l.confirm(dctx, node, member, describe)
			cancel()
		}
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && failing == nil:
			onErr(err) // once per failing streak
		}
		failing = err
	}
}

// coordinator returns the broker node kgo takes for group's coordinator.
func coordinator(ctx context.Context, cl *kgo.Client, group string) (int32, error) {
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorType = 0 // group
	req.CoordinatorKeys = []string{group}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, fmt.Errorf("finding the group coordinator: %w", err)
	}
	if len(resp.Coordinators) != 1 {
		return 0, errors.New("finding the group coordinator: no answer for the group")
	}
	c := resp.Coordinators[0]
	if err := kerr.ErrorForCode(c.ErrorCode); err != nil {
		return 0, fmt.Errorf("finding the group coordinator: %w", err)
	}
	return c.NodeID, nil
}

// describeMember describes group at broker node and reports whether member
// is in it with no rebalance under way for it: in the classic protocol,
// the group is Stable; in the consumer protocol (KIP-848), the member's
// epoch is the group's target assignment epoch (a member with partitions
// to revoke keeps its earlier epoch until it has revoked them).
func describeMember(ctx context.Context, cl *kgo.Client, group string, node int32, member string, consumer bool) (bool, error) {
	b := cl.Broker(int(node))
	if consumer {
		req := kmsg.NewPtrConsumerGroupDescribeRequest()
		req.Groups = []string{group}
		resp, err := req.RequestWith(ctx, b)
		if err != nil {
			return false, fmt.Errorf("describing the group: %w", err)
		}
		for _, g := range resp.Groups {
			if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
				return false, fmt.Errorf("describing the group: %w", err)
			}
			for _, m := range g.Members {
				if m.MemberID == member {
					return m.MemberEpoch == g.AssignmentEpoch, nil
				}
			}
		}
		return false, nil
	}
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	resp, err := req.RequestWith(ctx, b)
	if err != nil {
		return false, fmt.Errorf("describing the group: %w", err)
	}
	for _, g := range resp.Groups {
		if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
			return false, fmt.Errorf("describing the group: %w", err)
		}
		if g.State != "Stable" {
			return false, nil
		}
		for _, m := range g.Members {
			if m.MemberID == member {
				return true, nil
			}
		}
	}
	return false, nil
}
