package admin

import (
	"strings"
	"testing"
	"time"
)

// A receiver out of its group is a problem for `wowd status` once wowd has
// run for --stuck-after, as its --help and docs/operations.md say: a start
// joins its groups meanwhile (/readyz answers 503 until it did). A review
// found the docs promising it from the start; they now say what the check
// does, which this holds.
func TestNotAMemberIsAProblemOnceWowdHasRunForStuckAfter(t *testing.T) {
	st := Status{
		Receivers: []ReceiverStatus{{
			Dispatcher: "projection", Context: "shop", GroupID: "carts.projection.shop",
			Joined: false, Paused: PauseNone, Partitions: []PartitionStatus{},
		}},
	}
	for _, c := range []struct {
		uptime float64
		want   bool
	}{{30, false}, {299, false}, {300, true}, {3600, true}} {
		st.UptimeSeconds = c.uptime
		problems := st.Problems(5 * time.Minute)
		if got := strings.Contains(strings.Join(problems, "\n"), "not a member"); got != c.want {
			t.Errorf("a receiver out of its group %vs after the start: problem %v, want %v (%q)", c.uptime, got, c.want, problems)
		}
	}
}
