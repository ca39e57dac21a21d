package receiver

import (
	"testing"
	"time"

	"github.com/wowd/wowd/internal/testwait"
)

// retired reports how many incarnations r's deadline watcher is asked to
// watch.
func retired(r *Receiver) int {
	r.retireMu.Lock()
	defer r.retireMu.Unlock()
	return len(r.retiring)
}

// TestRebalancesRetireNothingThatIsNotPending checks that a member seeing
// other members join and leave does not keep the incarnations it gave up:
// with nothing pending in them, there is no try whose deadline to watch.
// Without a handler timeout nothing ever pruned them, so every rebalance
// kept its revoked partitions (trackers, jobs) for the receiver's lifetime.
func TestRebalancesRetireNothingThatIsNotPending(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
	}{
		{"no handler timeout", 0},
		{"with a handler timeout", time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 4)
			group := "g-retire-" + tc.name
			produce(t, h.c, testTopic, 200, 20)
			rec := newRecorder()
			timeout := func(o *Options) { o.HandlerTimeout = tc.timeout }
			a := h.receiver(group, rec, 64, timeout)
			defer stop(t, a)
			testwait.For(t, 30*time.Second, "a to handle every record", func() bool { return rec.total.Load() >= 200 })
			for i := range 3 {
				b := h.receiver(group, rec, 64, timeout)
				testwait.For(t, 30*time.Second, "b to get partitions", func() bool { return b.Snapshot().AssignedPartitions > 0 })
				stop(t, b)
				testwait.For(t, 30*time.Second, "a to own every partition again", func() bool { return a.Snapshot().AssignedPartitions == 4 })
				// The watcher, where there is one, prunes within a second.
				testwait.For(t, 5*time.Second, "a to retire nothing", func() bool { return retired(a) == 0 })
				t.Logf("cycle %d: %d retired", i, retired(a))
			}
		})
	}
}
