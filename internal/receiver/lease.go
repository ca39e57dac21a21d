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
// heartbeat (or join) it accepted from it, or a rebalance timeout after a
// rebalance began that the member has not rejoined (in the consumer
// protocol, KIP-848: after it was asked to revoke partitions it has not
// revoked). So a member is in the group at least until the earlier of the
// sending of a request the coordinator accepted plus the session timeout,
// and the last moment it was seen with no rebalance under way plus the
// rebalance timeout. The lease ends a quarter of each timeout before, for
// the writes in flight.
//
// An answer alone does not say that the coordinator accepted the request:
// kgo's hooks give its timing, not its error code, and the coordinator
// answers the heartbeats of a member it dropped too (UNKNOWN_MEMBER_ID).
// kgo reports that loss (onLost, a new member ID) only once the poll loop
// lets a rebalance run, and in the cooperative protocol only after a revoke
// under way ends, while its heartbeats go on, so extending the lease on
// every answer kept a dropped member's lease alive for that long (found by
// review). The lease is therefore extended only by a confirmation: a
// describe of the group, sent to the coordinator after the answer came
// from it, that lists the member (by the member ID kgo held when it was
// sent). A member listed then was in the group when the answered request
// reached the coordinator (member IDs are never reused), so that request
// counted. The describe also tells whether a rebalance is under way for
// the member (classic protocol: the group is not Stable; consumer
// protocol: the member's epoch is behind the target assignment's, which a
// member keeps until it has revoked what it must); the latest describe
// that saw none bounds the rebalance timeout's count. A describe that does
// not list the member ends the lease at once: an operator can remove a
// member without any timeout.
//
// SyncGroup answers do not count: a coordinator accepts a late follower's
// sync without restarting its session. With the consumer protocol the
// describe reads the coordinator's last durable state, which may still
// list a member just removed; there a confirmation extends the lease only
// as far as one made at least short() before it could (see confirm).
//
// The lease runs on the monotonic clock, and also ends by the wall clock,
// so that neither a step of the wall clock nor a suspended process extends
// it. confirm makes the describes; run repeats them.
type lease struct {
	session   atomic.Int64 // the group's session timeout (ns); 0 until the client is made: no lease
	rebalance atomic.Int64 // the group's rebalance timeout (ns); 0: unset, the session stands in for it
	until     atomic.Int64 // the lease's end on its clock (see at); 0: no lease
	untilWall atomic.Int64 // the same end in unix nanoseconds

	mu       sync.Mutex      // guards answered, consumer, settled and pending*; and the order of stores to until and untilWall. A leaf.
	answered map[int32]int64 // by broker node: the latest sending (on the lease's clock) of a heartbeat or join it answered
	consumer bool            // the latest group request answered was a ConsumerGroupHeartbeat (KIP-848)
	settled  int64           // the sending of the latest describe that listed the member with no rebalance under way for it; 0 none
	// pending is the end a confirmation allowed with the consumer
	// protocol, which a later one applies (see confirm), pendingAt when
	// its describe was sent and pendingOf the member it was for.
	pending   int64
	pendingAt int64
	pendingOf string

	kick     chan struct{}                 // an answer came while the lease is short: confirm now (capacity 1)
	extended atomic.Pointer[chan struct{}] // closed (and replaced) when a confirmation extends the lease
	base     time.Time                     // the lease's clock counts from it (monotonic)
	now      func() time.Time
}

func newLease() *lease {
	return newLeaseOn(time.Now)
}

// newLeaseOn is newLease on the clock now.
func newLeaseOn(now func() time.Time) *lease {
	// The clock starts an hour before now, so that none of its readings,
	// the sendings of requests answered after now included, is 0 (no
	// lease, nothing settled) or below.
	l := &lease{answered: make(map[int32]int64), kick: make(chan struct{}, 1), base: now().Add(-time.Hour), now: now}
	ch := make(chan struct{})
	l.extended.Store(&ch)
	return l
}

// at returns t on the lease's clock: nanoseconds since base, by the
// monotonic clock where t has its reading.
func (l *lease) at(t time.Time) int64 { return int64(t.Sub(l.base)) }

var _ kgo.HookBrokerE2E = (*lease)(nil)

// OnBrokerE2E notes the sending of every answered heartbeat or join (of
// the consumer protocol, KIP-848: its heartbeat), whatever its error code:
// confirm decides what it proves.
func (l *lease) OnBrokerE2E(meta kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	switch kmsg.Key(key) {
	case kmsg.Heartbeat, kmsg.JoinGroup, kmsg.ConsumerGroupHeartbeat:
	default:
		return
	}
	if e2e.Err() != nil {
		return
	}
	now := l.at(l.now())
	sent := now - int64(e2e.DurationE2E())
	l.mu.Lock()
	if prev, ok := l.answered[meta.NodeID]; !ok || sent > prev {
		l.answered[meta.NodeID] = sent
	}
	l.consumer = kmsg.Key(key) == kmsg.ConsumerGroupHeartbeat
	l.mu.Unlock()
	// A lease with less than half its length left is confirmed now, not at
	// the next tick: at the start, and after a lapse.
	if session := l.session.Load(); session > 0 && l.until.Load()-now < session/2 {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
}

// end returns when the lease ends by the wall clock (the zero time
// without a lease).
func (l *lease) end() time.Time {
	if l.until.Load() == 0 {
		return time.Time{}
	}
	return time.Unix(0, l.untilWall.Load())
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
func (l *lease) holds() bool {
	now := l.now()
	u := l.until.Load()
	return u != 0 && l.at(now) < u && now.UnixNano() < l.untilWall.Load()
}

// await returns once the lease holds, ctx ends or d passed, and reports
// whether it holds: a partition assigned as the member joins takes its
// owner epoch as soon as the membership is confirmed, without a warning
// for the moment in between.
func (l *lease) await(ctx context.Context, d time.Duration) bool {
	if l.holds() {
		return true // the common case: no timer
	}
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

// membership is what a describe of the group says of a member.
type membership struct {
	listed  bool // the member is in the group
	settled bool // and no rebalance is under way for it
}

// groupDescriber sends a describe of the group to broker node (the group's
// coordinator) and reports what it says of member; consumer selects the
// consumer protocol's describe.
type groupDescriber func(ctx context.Context, node int32, member string, consumer bool) (membership, error)

// confirm asks coordinator (the node taken for the group's coordinator)
// what it knows of member (the member ID kgo holds), and extends the lease
// from the latest heartbeat or join that coordinator answered before the
// question, or ends it when the member is not in the group. It returns the
// describe's error.
//
// With the consumer protocol the extension a confirmation allows is
// applied only by a later one, a describe sent at least short() after it
// (an earlier one leaves it waiting), by which time the coordinator has
// made durable what it did before the first: a member it had removed, but
// whose removal was not yet durable, is then no longer listed. That the
// coordinator makes its state durable within short() is the assumption;
// for the same reason a describe that finds no rebalance under way counts
// as of short() before it was sent.
func (l *lease) confirm(ctx context.Context, coordinator int32, member string, describe groupDescriber) error {
	session, rebalance := l.session.Load(), l.rebalance.Load()
	if session <= 0 || member == "" {
		return nil
	}
	l.mu.Lock()
	sent, ok := l.answered[coordinator]
	consumer := l.consumer
	l.mu.Unlock()
	if !ok {
		return nil // nothing answered by this coordinator yet: nothing to confirm
	}
	asked := l.at(l.now())
	m, err := describe(ctx, coordinator, member, consumer)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !m.listed {
		l.until.Store(0)
		l.settled, l.pending, l.pendingAt, l.pendingOf = 0, 0, 0, ""
		return nil
	}
	if m.settled {
		at := asked
		if consumer {
			at -= int64(l.short())
		}
		l.settled = max(l.settled, at)
	}
	if l.settled == 0 {
		return nil // not seen without a rebalance under way yet: the rebalance timeout's count is not bounded
	}
	if rebalance <= 0 {
		rebalance = session
	}
	end := min(sent+session-session/4, l.settled+rebalance-rebalance/4)
	if consumer {
		prev, prevAt, of := l.pending, l.pendingAt, l.pendingOf
		if prev != 0 && of == member && asked-prevAt < int64(l.short()) {
			return nil // too soon after the confirmation waiting: it keeps waiting (a kick can come at once)
		}
		l.pending, l.pendingAt, l.pendingOf = end, asked, member
		if prev == 0 || of != member {
			return nil
		}
		end = min(end, prev)
	}
	l.extendLocked(end)
	return nil
}

// extendLocked moves the lease's end to end (on its clock) if that is
// later. l.mu must be held.
func (l *lease) extendLocked(end int64) {
	if end <= l.until.Load() {
		return
	}
	now := l.now()
	l.untilWall.Store(now.UnixNano() + end - l.at(now))
	l.until.Store(end)
	ch := make(chan struct{})
	close(*l.extended.Swap(&ch))
}

// interval returns how often run confirms the lease: an eighth of the
// session, at least 50 ms and at most 5 s.
func (l *lease) interval() time.Duration {
	return min(max(time.Duration(l.session.Load())/8, 50*time.Millisecond), 5*time.Second)
}

// short is how soon run confirms again while a confirmation waits for the
// next to be applied (see confirm) and the lease does not hold.
func (l *lease) short() time.Duration { return min(l.interval(), 500*time.Millisecond) }

// awaitingNext reports whether a confirmation waits for the next one.
func (l *lease) awaitingNext() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pending != 0
}

// run confirms the lease every interval, sooner while it does not hold and
// a confirmation waits for the next, and at once when an answer comes
// while the lease is short, until ctx ends. Its owner is the receiver's
// parking (startParking starts it, stopParking stops it): only parking
// writes use the lease.
func (l *lease) run(ctx context.Context, cl *kgo.Client, group string, onErr func(error)) {
	describe := func(ctx context.Context, node int32, member string, consumer bool) (membership, error) {
		return describeMember(ctx, cl, group, node, member, consumer)
	}
	t := time.NewTimer(l.interval())
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
		dctx, cancel := context.WithTimeout(ctx, max(time.Duration(l.session.Load())/4, time.Second))
		node, err := coordinator(dctx, cl, group)
		if err == nil {
			err = l.confirm(dctx, node, member, describe)
		}
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && failing == nil:
			onErr(err) // once per failing streak
		}
		failing = err
		next := l.interval()
		if !l.holds() && l.awaitingNext() {
			next = l.short()
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(next)
	}
}

// coordinator asks any broker which one is group's coordinator.
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

// describeMember describes group at broker node and reports what it says
// of member: whether it is in the group, and whether a rebalance is under
// way for it (classic protocol: the group is not Stable; consumer
// protocol, KIP-848: the member's epoch is behind the target assignment's,
// as it is while the member has partitions to revoke).
func describeMember(ctx context.Context, cl *kgo.Client, group string, node int32, member string, consumer bool) (membership, error) {
	b := cl.Broker(int(node))
	if consumer {
		req := kmsg.NewPtrConsumerGroupDescribeRequest()
		req.Groups = []string{group}
		resp, err := req.RequestWith(ctx, b)
		if err != nil {
			return membership{}, fmt.Errorf("describing the group: %w", err)
		}
		for _, g := range resp.Groups {
			if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
				return membership{}, fmt.Errorf("describing the group: %w", err)
			}
			for _, m := range g.Members {
				if m.MemberID == member {
					return membership{listed: true, settled: m.MemberEpoch == g.AssignmentEpoch}, nil
				}
			}
		}
		return membership{}, nil
	}
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	resp, err := req.RequestWith(ctx, b)
	if err != nil {
		return membership{}, fmt.Errorf("describing the group: %w", err)
	}
	for _, g := range resp.Groups {
		if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
			return membership{}, fmt.Errorf("describing the group: %w", err)
		}
		for _, m := range g.Members {
			if m.MemberID == member {
				return membership{listed: true, settled: g.State == "Stable"}, nil
			}
		}
	}
	return membership{}, nil
}
