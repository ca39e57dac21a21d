package receiver

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The lease counts from when an answered group request was sent, for three
// quarters of the session; other requests and failed ones do not extend it.
func TestLeaseFollowsTheCoordinatorsAnswers(t *testing.T) {
	l := &lease{}
	answered := kgo.BrokerE2E{TimeToWrite: time.Millisecond, ReadWait: 2 * time.Second}
	l.OnBrokerE2E(kgo.BrokerMetadata{}, int16(kmsg.Heartbeat), answered)
	if l.holds() {
		t.Fatal("a lease without a session timeout")
	}
	l.session.Store(int64(8 * time.Second))
	for _, key := range []kmsg.Key{kmsg.Produce, kmsg.Fetch, kmsg.OffsetCommit, kmsg.Metadata} {
		l.OnBrokerE2E(kgo.BrokerMetadata{}, int16(key), answered)
	}
	l.OnBrokerE2E(kgo.BrokerMetadata{}, int16(kmsg.Heartbeat), kgo.BrokerE2E{ReadErr: errors.New("i/o timeout")})
	if l.holds() {
		t.Fatal("the lease extended by other requests or a heartbeat without an answer")
	}
	for _, key := range []kmsg.Key{kmsg.Heartbeat, kmsg.JoinGroup, kmsg.SyncGroup} {
		l.until.Store(0)
		before := time.Now()
		l.OnBrokerE2E(kgo.BrokerMetadata{}, int16(key), answered)
		want := before.Add(-answered.DurationE2E()).Add(6 * time.Second)
		if end := l.end(); end.Before(want) || end.After(time.Now().Add(-answered.DurationE2E()).Add(6*time.Second)) {
			t.Fatalf("%v: lease ends %v, want about %v", key, end, want)
		}
	}
	end := l.end()
	l.OnBrokerE2E(kgo.BrokerMetadata{}, int16(kmsg.Heartbeat), kgo.BrokerE2E{ReadWait: time.Hour}) // sent long ago
	if !l.end().Equal(end) {
		t.Fatal("an older answer shortened the lease")
	}
	if !l.holds() {
		t.Fatal("the lease does not hold within it")
	}
	l.until.Store(time.Now().Add(-time.Second).UnixNano())
	if l.holds() {
		t.Fatal("the lease holds after it ended")
	}
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
