package receiver

import (
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// lease is how long this member can be sure it is still in its consumer
// group, from what it last heard from the group coordinator.
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
// heartbeat it received; a heartbeat (or join, or sync) answered was
// received after it was sent, so the member is in the group at least until
// its sending plus the session timeout. The lease ends a quarter of the
// session before that, for the writes in flight.
type lease struct {
	session atomic.Int64 // the group's session timeout, or its rebalance timeout if shorter (ns); 0 until the client is made: no lease
	until   atomic.Int64 // unix nanoseconds; 0 before the first answer
}

var _ kgo.HookBrokerE2E = (*lease)(nil)

// OnBrokerE2E extends the lease on every answered heartbeat, join or sync
// (of the consumer protocol, KIP-848: its heartbeat).
// An answer carrying an error code extends it too: the member was known
// then, and an answer saying it is not (UNKNOWN_MEMBER_ID) makes kgo end
// the session, which closes the partitions at once.
func (l *lease) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	switch kmsg.Key(key) {
	case kmsg.Heartbeat, kmsg.JoinGroup, kmsg.SyncGroup, kmsg.ConsumerGroupHeartbeat:
	default:
		return
	}
	session := time.Duration(l.session.Load())
	if e2e.Err() != nil || session <= 0 {
		return
	}
	end := time.Now().Add(-e2e.DurationE2E()).Add(session - session/4).UnixNano()
	for {
		cur := l.until.Load()
		if end <= cur || l.until.CompareAndSwap(cur, end) {
			return
		}
	}
}

// end returns when the lease ends (the zero time before the first answer).
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
func (l *lease) holds() bool { return time.Now().Before(l.end()) }
