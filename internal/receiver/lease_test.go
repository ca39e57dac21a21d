package receiver

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/wowd/wowd/internal/testwait"
)

// The lease is extended only by a confirmation: a describe, sent to the
// coordinator after a heartbeat or join it answered, that lists the
// member. It then counts from that request's sending, for three quarters
// of the session. Answers alone, other requests (a sync included), failed
// ones, another broker's answers and describes that fail extend nothing:
// the coordinator answers a member it dropped too.
func TestLeaseOnlyFromConfirmedAnswers(t *testing.T) {
	clock := time.Unix(1_000_000, 0)
	newL := func(session time.Duration) *lease {
		l := newLeaseOn(func() time.Time { return clock })
		l.session.Store(int64(session))
		return l
	}
	var (
		said      membership
		err       error
		asked     int
		askedNode int32
		askedAs   string
		consumer  bool
	)
	describe := func(_ context.Context, node int32, member string, c bool) (membership, error) {
		asked++
		askedNode, askedAs, consumer = node, member, c
		return said, err
	}
	coord := kgo.BrokerMetadata{NodeID: 1}
	answered := kgo.BrokerE2E{TimeToWrite: time.Millisecond, ReadWait: 2 * time.Second}
	sent := clock.Add(-answered.DurationE2E())
	ctx := context.Background()
	in := membership{listed: true, settled: true}

	l := newL(0)
	l.OnBrokerE2E(coord, int16(kmsg.Heartbeat), answered)
	said = in
	if e := l.confirm(ctx, 1, "m-1", describe); e != nil || l.holds() || asked != 0 {
		t.Fatalf("without a session timeout: holds %v, %d describes, %v", l.holds(), asked, e)
	}
	l = newL(8 * time.Second)
	for _, key := range []kmsg.Key{kmsg.Produce, kmsg.Fetch, kmsg.OffsetCommit, kmsg.Metadata, kmsg.DescribeGroups, kmsg.SyncGroup} {
		l.OnBrokerE2E(coord, int16(key), answered)
	}
	l.OnBrokerE2E(coord, int16(kmsg.Heartbeat), kgo.BrokerE2E{ReadErr: errors.New("i/o timeout")})
	if e := l.confirm(ctx, 1, "m-1", describe); e != nil || l.holds() || asked != 0 {
		t.Fatalf("other requests, a sync or a heartbeat without an answer: holds %v, %d describes", l.holds(), asked)
	}

	l.OnBrokerE2E(coord, int16(kmsg.Heartbeat), answered)
	if l.holds() {
		t.Fatal("an answer alone gave a lease")
	}
	if l.confirm(ctx, 2, "m-1", describe); l.holds() || asked != 0 {
		t.Fatal("confirmed at a broker that answered nothing (the coordinator moved)")
	}
	if l.confirm(ctx, 1, "", describe); l.holds() || asked != 0 {
		t.Fatal("confirmed without a member ID")
	}
	said, err = in, errors.New("not coordinator")
	if e := l.confirm(ctx, 1, "m-1", describe); l.holds() || e != err {
		t.Fatalf("a failed describe: holds %v, error %v", l.holds(), e)
	}
	err = nil
	for _, key := range []kmsg.Key{kmsg.Heartbeat, kmsg.JoinGroup} {
		l = newL(8 * time.Second)
		l.OnBrokerE2E(coord, int16(key), answered)
		if e := l.confirm(ctx, 1, "m-1", describe); e != nil {
			t.Fatal(e)
		}
		if askedNode != 1 || askedAs != "m-1" || consumer {
			t.Fatalf("%v: described at node %d for %q, consumer protocol %v", key, askedNode, askedAs, consumer)
		}
		if want := sent.Add(6 * time.Second); !l.end().Equal(want) || !l.holds() {
			t.Fatalf("%v: lease ends %v (holds %v), want %v", key, l.end(), l.holds(), want)
		}
	}
	end := l.end()
	l.answered[1] = 0
	l.OnBrokerE2E(coord, int16(kmsg.Heartbeat), kgo.BrokerE2E{ReadWait: time.Hour}) // sent long ago
	l.confirm(ctx, 1, "m-1", describe)
	if !l.end().Equal(end) {
		t.Fatal("an older answer shortened the lease")
	}
	clock = end
	if l.holds() {
		t.Fatal("the lease holds after it ended")
	}
}

// With the consumer protocol (KIP-848) the coordinator's describe reads
// its last durable state, which may still list a member it just removed:
// a confirmation extends the lease only as far as one at least short()
// before it allowed, for the same member, and a describe that finds no
// rebalance under way counts as of short() before it was sent. A second
// describe right after the first (a heartbeat's kick) applies nothing and
// leaves the first waiting. Found by the second review: kicks came with no
// gap at all.
func TestLeaseUnderTheConsumerProtocolLagsAConfirmation(t *testing.T) {
	clock := time.Unix(1_000_000, 0)
	l := newLeaseOn(func() time.Time { return clock })
	l.session.Store(int64(8 * time.Second)) // short() is 500 ms
	describe := func(context.Context, int32, string, bool) (membership, error) {
		return membership{listed: true, settled: true}, nil
	}
	coord := kgo.BrokerMetadata{NodeID: 1}
	ctx := context.Background()
	l.OnBrokerE2E(coord, int16(kmsg.ConsumerGroupHeartbeat), kgo.BrokerE2E{})
	first := clock
	l.confirm(ctx, 1, "m-1", describe)
	if l.holds() || !l.awaitingNext() {
		t.Fatalf("the first confirmation gave a lease (holds %v) or waits for none", l.holds())
	}
	clock = clock.Add(time.Millisecond)
	l.OnBrokerE2E(coord, int16(kmsg.ConsumerGroupHeartbeat), kgo.BrokerE2E{})
	l.confirm(ctx, 1, "m-1", describe)
	if l.holds() {
		t.Fatal("a confirmation 1 ms after the first applied it")
	}
	clock = first.Add(500 * time.Millisecond)
	l.confirm(ctx, 1, "m-2", describe) // another member ID: m-1's extension is not its
	if l.holds() {
		t.Fatal("a confirmation for member m-1 applied to m-2")
	}
	second := clock
	clock = clock.Add(499 * time.Millisecond)
	l.confirm(ctx, 1, "m-2", describe)
	if l.holds() {
		t.Fatal("a confirmation 499 ms after the one waiting applied it")
	}
	clock = second.Add(500 * time.Millisecond)
	l.confirm(ctx, 1, "m-2", describe)
	// m-2's waiting end: its answer (sent at first+1ms) plus 6 s, bounded by
	// its settled describe (second - 500 ms) plus 6 s.
	if want := second.Add(-500 * time.Millisecond).Add(6 * time.Second); !l.end().Equal(want) {
		t.Fatalf("lease ends %v, want %v: the earlier confirmation's extension", l.end(), want)
	}
}

// A rebalance drops a member that has not rejoined a rebalance timeout
// after it began: while a describe says one is under way, the lease
// counts from the last describe that said none, by the rebalance timeout.
// A describe that does not list the member ends the lease at once. Either
// clock ends it.
func TestLeaseBoundedByARebalanceUnderWay(t *testing.T) {
	clock := time.Unix(1_000_000, 0)
	l := newLeaseOn(func() time.Time { return clock })
	l.session.Store(int64(8 * time.Second))
	l.rebalance.Store(int64(4 * time.Second))
	var said membership
	describe := func(context.Context, int32, string, bool) (membership, error) { return said, nil }
	coord := kgo.BrokerMetadata{NodeID: 1}
	ctx := context.Background()

	l.OnBrokerE2E(coord, int16(kmsg.Heartbeat), kgo.BrokerE2E{})
	said = membership{listed: true}
	if l.confirm(ctx, 1, "m-1", describe); l.holds() {
		t.Fatal("a lease while a rebalance is under way, never seen without one")
	}
	said.settled = true
	settled := clock
	if l.confirm(ctx, 1, "m-1", describe); !l.end().Equal(settled.Add(3 * time.Second)) {
		t.Fatalf("lease ends %v, want %v: by the rebalance timeout, the shorter", l.end(), settled.Add(3*time.Second))
	}
	clock = clock.Add(2 * time.Second)
	l.OnBrokerE2E(coord, int16(kmsg.Heartbeat), kgo.BrokerE2E{})
	said.settled = false
	if l.confirm(ctx, 1, "m-1", describe); !l.end().Equal(settled.Add(3 * time.Second)) {
		t.Fatalf("lease ends %v while a rebalance is under way, want %v", l.end(), settled.Add(3*time.Second))
	}
	said.settled = true
	if l.confirm(ctx, 1, "m-1", describe); !l.end().Equal(clock.Add(3 * time.Second)) {
		t.Fatalf("lease ends %v once the rebalance is over, want %v", l.end(), clock.Add(3*time.Second))
	}
	if !l.holds() {
		t.Fatal("no lease within it")
	}
	wall := l.untilWall.Load()
	l.untilWall.Store(clock.Add(-time.Second).UnixNano()) // suspended: only the wall clock moved past the end
	if l.holds() {
		t.Fatal("the lease holds past its end by the wall clock")
	}
	l.untilWall.Store(wall)
	said = membership{}
	if l.confirm(ctx, 1, "m-1", describe); l.holds() {
		t.Fatal("the lease holds after a describe that does not list the member")
	}
}

// An answer that comes while the lease has less than half its length left
// asks run for a confirmation at once (at the start, and after a lapse),
// not at its next tick.
func TestLeaseAnswersAskForAConfirmationWhenShort(t *testing.T) {
	l := newLease()
	l.session.Store(int64(8 * time.Second))
	l.OnBrokerE2E(kgo.BrokerMetadata{NodeID: 1}, int16(kmsg.Heartbeat), kgo.BrokerE2E{})
	select {
	case <-l.kick:
	default:
		t.Fatal("no confirmation asked for without a lease")
	}
	l.until.Store(l.at(time.Now().Add(7 * time.Second)))
	l.OnBrokerE2E(kgo.BrokerMetadata{NodeID: 1}, int16(kmsg.Heartbeat), kgo.BrokerE2E{})
	select {
	case <-l.kick:
		t.Fatal("a confirmation asked for with most of the lease left")
	default:
	}
}

// TestADroppedMembersAnswersDoNotExtendItsLease: the coordinator dropped
// the member (here an operator removed it), and kgo has not told it yet: it
// reports the loss only once the poll loop allows a rebalance, which this
// test never does. The coordinator answers the member's heartbeats
// meanwhile (UNKNOWN_MEMBER_ID), and those answers used to extend its
// lease, so that it could still start parking writes, an owner epoch
// included, for partitions that were another member's by then. The lease
// now ends as if the heartbeats had gone unanswered. Once the member is
// let rejoin, its new membership is confirmed.
func TestADroppedMembersAnswersDoNotExtendItsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const group = "g-dropped"
		h := newVirtualHarness(t, 1)
		l := newLease()
		var lost atomic.Bool
		cl, err := kgo.NewClient(append(brokers(h.c),
			kgo.ConsumerGroup(group), kgo.ConsumeTopics(testTopic), kgo.BlockRebalanceOnPoll(),
			kgo.SessionTimeout(8*time.Second), kgo.HeartbeatInterval(500*time.Millisecond),
			kgo.OnPartitionsLost(func(context.Context, *kgo.Client, map[string][]int32) { lost.Store(true) }),
			kgo.WithHooks(l))...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		l.session.Store(int64(8 * time.Second))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			l.run(ctx, cl, group, func(error) {})
		}()
		defer func() { cancel(); <-done }()
		testwait.For(t, 30*time.Second, "the member confirmed", func() bool { m, _ := cl.GroupMetadata(); return m != "" && l.holds() })
		canceled, cancelPoll := context.WithCancel(context.Background())
		cancelPoll()
		cl.PollRecords(canceled, 0) // no rebalance, onLost included, until AllowRebalance
		defer cl.AllowRebalance()   // before Close, which waits for it, when the test fails

		member, _ := cl.GroupMetadata()
		admin, err := kgo.NewClient(brokers(h.c)...)
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close()
		leave := kmsg.NewPtrLeaveGroupRequest()
		leave.Group = group
		m := kmsg.NewLeaveGroupRequestMember()
		m.MemberID = member
		leave.Members = append(leave.Members, m)
		resp, err := leave.RequestWith(context.Background(), admin)
		if err != nil || len(resp.Members) != 1 || resp.Members[0].ErrorCode != 0 {
			t.Fatalf("removing the member: %v %+v", err, resp)
		}
		removed := time.Now()
		time.Sleep(2 * time.Second) // the next describe (every second) does not list the member
		if m, _ := cl.GroupMetadata(); m != member || lost.Load() {
			t.Fatalf("member %q (was %q), lost %v: kgo learned of the removal, the window this tests is closed", m, member, lost.Load())
		}
		if l.holds() {
			t.Fatalf("the lease holds 2 s after the member was removed (it ends at %v, removed at %v)", l.end(), removed)
		}
		time.Sleep(8 * time.Second) // and its heartbeat's answer (UNKNOWN_MEMBER_ID) gives it none
		if l.holds() {
			t.Fatal("the lease holds 10 s after the member was removed, with an 8 s session")
		}
		cl.AllowRebalance()
		testwait.For(t, 30*time.Second, "the new membership confirmed", func() bool {
			m, _ := cl.GroupMetadata()
			return lost.Load() && m != member && m != "" && l.holds()
		})
	})
}

// The lease is bounded by the rebalance timeout as well as the session
// (TestLeaseBoundedByARebalanceUnderWay): the receiver gives it both, as
// the client has them. Found by review, when only the session bounded it.
func TestLeaseGetsBothTimeouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		for _, c := range []struct{ session, rebalance time.Duration }{
			{45 * time.Second, time.Minute},
			{45 * time.Second, 10 * time.Second},
		} {
			r := h.receiver("g-lease-"+c.rebalance.String(), acking, 16, func(o *Options) {
				o.ClientOpts = append(o.ClientOpts, kgo.SessionTimeout(c.session), kgo.RebalanceTimeout(c.rebalance))
			})
			if s, rb := time.Duration(r.lease.session.Load()), time.Duration(r.lease.rebalance.Load()); s != c.session || rb != c.rebalance {
				t.Errorf("the lease has session %v and rebalance timeout %v, want %v and %v", s, rb, c.session, c.rebalance)
			}
			stop(t, r)
		}
	})
}

// TestDescribeTellsARebalanceUnderWay: what describeMember reads from the
// coordinator (kfake here, a real broker in the real-Kafka suite). A member
// that cannot take part in a rebalance (its poll holds it off) is listed,
// with a rebalance under way for it, from when a second member joins until
// it is let go on: in the classic protocol (eager, so that it must revoke
// before it rejoins) the group is not Stable; in the consumer protocol its
// epoch is behind the target assignment's while it has partitions to
// revoke.
func TestDescribeTellsARebalanceUnderWay(t *testing.T) {
	for _, c := range []struct {
		name     string
		opt      kgo.Opt
		consumer bool
	}{
		{"classic", kgo.Balancers(kgo.RangeBalancer()), false},
		{"consumer", kgo.ServerSideBalancer(), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newVirtualHarness(t, 4)
				group := "g-describe-" + c.name
				join := func() *kgo.Client {
					cl, err := kgo.NewClient(append(brokers(h.c), kgo.ConsumerGroup(group), kgo.ConsumeTopics(testTopic),
						kgo.BlockRebalanceOnPoll(), kgo.HeartbeatInterval(200*time.Millisecond), c.opt)...)
					if err != nil {
						t.Fatal(err)
					}
					return cl
				}
				a := join()
				defer a.Close()
				ctx := context.Background()
				describe := func() membership {
					t.Helper()
					member, _ := a.GroupMetadata()
					node, err := coordinator(ctx, a, group)
					if err != nil {
						return membership{}
					}
					m, err := describeMember(ctx, a, group, node, member, c.consumer)
					if err != nil {
						return membership{}
					}
					return m
				}
				settled := membership{listed: true, settled: true}
				testwait.For(t, 30*time.Second, "the first member settled", func() bool { return describe() == settled })
				canceled, cancel := context.WithCancel(ctx)
				cancel()
				a.PollRecords(canceled, 0) // no rebalance until AllowRebalance
				defer a.AllowRebalance()   // before Close, which waits for it, when the test fails
				b := join()
				defer b.Close()
				testwait.For(t, 10*time.Second, "a rebalance under way for the first member", func() bool {
					return describe() == membership{listed: true}
				})
				a.AllowRebalance()
				testwait.For(t, 30*time.Second, "the first member settled again", func() bool { return describe() == settled })
			})
		})
	}
}
