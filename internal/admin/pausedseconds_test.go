package admin

import (
	"testing"
	"time"
)

// TestPausedSecondsCountsOnlyHeldTime: minutes of a full window (healthy
// back-pressure) followed by seconds at the partition's share are reported
// as seconds paused for share_cap, not minutes: wowd status exited 1 at
// once. Two reasons other than a full window in a row count together.
func TestPausedSecondsCountsOnlyHeldTime(t *testing.T) {
	t0 := time.Now()
	tr := newTracker(t0)
	since := t0.Add(-time.Hour)
	var last []ReceiverStatus
	obs := func(at time.Duration, finished int64, paused string) {
		rs := []ReceiverStatus{{Dispatcher: "d", Context: "c", Joined: true, Partitions: []PartitionStatus{
			{Topic: "t", Partition: 0, Since: since, Finished: finished, HighWatermark: 100000, Committed: finished,
				Lag: 100000 - finished, InFlight: 128, Paused: paused},
		}}}
		tr.observe(t0.Add(at), rs, []map[string]float64{{"handled": float64(finished)}})
		last = rs
	}
	// Six minutes of back-pressure: the window is full, the partition makes
	// progress every sample (the sampler's 5s).
	var at time.Duration
	var finished int64
	for at = 0; at <= 6*time.Minute; at += 5 * time.Second {
		finished += 100
		obs(at, finished, PauseWindowFull)
	}
	st := Status{UptimeSeconds: 3600, Receivers: last}
	if p := st.Problems(5 * time.Minute); len(p) != 0 {
		t.Fatalf("healthy back-pressure reported: %v", p)
	}
	// Five seconds later the partition is at its share of the window,
	// still making progress.
	finished += 100
	obs(at, finished, PauseShareCap)
	st = Status{UptimeSeconds: 3600, Receivers: last}
	if p := st.Problems(5 * time.Minute); len(p) != 0 {
		t.Errorf("paused for share_cap for 5s, progressing, yet unhealthy: %v", p)
	}
	if got := last[0].Partitions[0].PausedSeconds; got != 0 {
		t.Errorf("paused for share_cap since this observation: PausedSeconds %v, want 0", got)
	}
	// Held on, for a sink backoff then: the two count together.
	for i := 0; i < 61; i++ {
		at += 5 * time.Second
		reason := PauseShareCap
		if i%2 == 1 {
			reason = PauseSinkBackoff
		}
		obs(at, finished, reason)
	}
	st = Status{UptimeSeconds: 3600, Receivers: last}
	if p := st.Problems(5 * time.Minute); len(p) == 0 {
		t.Errorf("held for 5m05s (share_cap, then sink_backoff, alternately) without a problem reported")
	}
}
