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
// coordinator after a group request it answered, that lists the member.
// It then counts from that request's sending, for three quarters of the
// session. Answers alone, other requests, failed ones, another broker's
// answers and describes that fail or do not list the member extend
// nothing: the coordinator answers a member it dropped too.
func TestLeaseOnlyFromConfirmedAnswers(t *testing.T) {
	l := newLease()
	clock := time.Unix(1_000_000, 0)
	l.now = func() time.Time { return clock }
	var (
		in        bool
		err       error
		asked     int
		askedNode int32
		askedAs   string
		consumer  bool
	)
	describe := func(_ context.Context, node int32, member string, c bool) (bool, error) {
		asked++
		askedNode, askedAs, consumer = node, member, c
		return in, err
	}
	coord := kgo.BrokerMetadata{NodeID: 1}
	answered := kgo.BrokerE2E{TimeToWrite: time.Millisecond, ReadWait: 2 * time.Second}
	sent := clock.Add(-answered.DurationE2E())
	ctx := context.Background()

	l.OnBrokerE2E(coord, int16(kmsg.Heartbeat), answered)
	in = true
	if e := l.confirm(ctx, 1, "m-1", describe); e != nil || l.holds() || asked != 0 {
		t.Fatalf("without a session timeout: holds %v, %d describes, %v", l.holds(), asked, e)
	}
	l.session.Store(int64(8 * time.Second))
	if l.holds() {
		t.Fatal("an answer alone gave a lease")
	}
	l = newLease()
	l.now = func() time.Time { return clock }
	l.session.Store(int64(8 * time.Second))
	for _, key := range []kmsg.Key{kmsg.Produce, kmsg.Fetch, kmsg.OffsetCommit, kmsg.Metadata, kmsg.DescribeGroups} {
		l.OnBrokerE2E(coord, int16(key), answered)
	}
	l.OnBrokerE2E(coord, int16(kmsg.Heartbeat), kgo.BrokerE2E{ReadErr: errors.New("i/o timeout")})
	if e := l.confirm(ctx, 1, "m-1", describe); e != nil || l.holds() || asked != 0 {
		t.Fatalf("other requests or a heartbeat without an answer: holds %v, %d describes", l.holds(), asked)
	}

	l.OnBrokerE2E(coord, int16(kmsg.Heartbeat), answered)
	if l.confirm(ctx, 2, "m-1", describe); l.holds() || asked != 0 {
		t.Fatal("confirmed at a broker that answered nothing (the coordinator moved)")
	}
	if l.confirm(ctx, 1, "", describe); l.holds() || asked != 0 {
		t.Fatal("confirmed without a member ID")
	}
	in = false
	if l.confirm(ctx, 1, "m-1", describe); l.holds() || asked != 1 || askedNode != 1 || askedAs != "m-1" || consumer {
		t.Fatalf("describe of node %d for %q (consumer %v) not listing the member: holds %v", askedNode, askedAs, consumer, l.holds())
	}
	in, err = true, errors.New("not coordinator")
	if e := l.confirm(ctx, 1, "m-1", describe); l.holds() || e != err {
		t.Fatalf("a failed describe: holds %v, error %v", l.holds(), e)
	}
	err = nil
	for _, key := range []kmsg.Key{kmsg.Heartbeat, kmsg.JoinGroup, kmsg.SyncGroup, kmsg.ConsumerGroupHeartbeat} {
		l = newLease()
		l.now = func() time.Time { return clock }
		l.session.Store(int64(8 * time.Second))
		l.OnBrokerE2E(coord, int16(key), answered)
		if e := l.confirm(ctx, 1, "m-1", describe); e != nil {
			t.Fatal(e)
		}
		if want := sent.Add(6 * time.Second); !l.end().Equal(want) {
			t.Fatalf("%v: lease ends %v, want %v", key, l.end(), want)
		}
		if consumer != (key == kmsg.ConsumerGroupHeartbeat) {
			t.Fatalf("%v: described with the consumer protocol %v", key, consumer)
		}
	}
	end := l.end()
	l.answered[1] = 0
	l.OnBrokerE2E(coord, int16(kmsg.Heartbeat), kgo.BrokerE2E{ReadWait: time.Hour}) // sent long ago
	l.confirm(ctx, 1, "m-1", describe)
	if !l.end().Equal(end) {
		t.Fatal("an older answer shortened the lease")
	}
	if !l.holds() {
		t.Fatal("the lease does not hold within it")
	}
	clock = end
	if l.holds() {
		t.Fatal("the lease holds after it ended")
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
	l.until.Store(time.Now().Add(7 * time.Second).UnixNano())
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
		end := l.end()
		time.Sleep(10 * time.Second) // the member heartbeats on, answered UNKNOWN_MEMBER_ID
		if m, _ := cl.GroupMetadata(); m != member || lost.Load() {
			t.Fatalf("member %q (was %q), lost %v: kgo learned of the removal, the window this tests is closed", m, member, lost.Load())
		}
		if l.end().After(removed) && !l.end().Equal(end) {
			t.Fatalf("the lease was extended to %v after the member was removed (at %v)", l.end(), removed)
		}
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

// The lease is bounded by the rebalance timeout when it is shorter than the
// session: a rebalance drops a member that does not rejoin within it,
// whatever its session. Found by review.
func TestLeaseBoundedByTheShorterTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		for _, c := range []struct{ session, rebalance, want time.Duration }{
			{45 * time.Second, time.Minute, 45 * time.Second},
			{45 * time.Second, 10 * time.Second, 10 * time.Second},
		} {
			r := h.receiver("g-lease-"+c.rebalance.String(), acking, 16, func(o *Options) {
				o.ClientOpts = append(o.ClientOpts, kgo.SessionTimeout(c.session), kgo.RebalanceTimeout(c.rebalance))
			})
			if got := time.Duration(r.lease.session.Load()); got != c.want {
				t.Errorf("session %v, rebalance %v: the lease is based on %v, want %v", c.session, c.rebalance, got, c.want)
			}
			stop(t, r)
		}
	})
}
