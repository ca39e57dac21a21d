package receiver

import (
	"testing"
	"time"
)

func TestStreakBacksOffAndRecovers(t *testing.T) {
	var s streak
	now := time.Unix(0, 0)
	// Mostly successes: never backs off.
	for i := range 100 {
		if started, _ := s.record(i%5 == 0, now); started {
			t.Fatalf("backed off at %d with 20%% failures", i)
		}
	}
	// Five failures in a row start a backoff.
	var started bool
	for i := 0; i < streakRun; i++ {
		started, _ = s.record(true, now)
	}
	if !started || !s.isFailing() {
		t.Fatal("five consecutive failures did not start a backoff")
	}
	if hold, until := s.hold(now); !hold || until.Sub(now) != streakMinDelay {
		t.Fatalf("hold %v until %v", hold, until)
	}
	// A failed probe after the delay doubles it.
	now = now.Add(streakMinDelay)
	s.record(true, now)
	if d := s.current(); d != 2*streakMinDelay {
		t.Fatalf("delay %v after a failed probe", d)
	}
	// Failures before the delay ends do not grow it.
	s.record(true, now.Add(time.Millisecond))
	if d := s.current(); d != 2*streakMinDelay {
		t.Fatalf("delay %v", d)
	}
	// The first success ends it.
	if _, ended := s.record(false, now); !ended || s.isFailing() {
		t.Fatal("a success did not end the backoff")
	}
	if hold, _ := s.hold(now); hold {
		t.Fatal("still holding after recovery")
	}
}

func TestStreakShareRule(t *testing.T) {
	var s streak
	now := time.Unix(0, 0)
	// Failures interleaved with rare successes: no run of five, but 80 %.
	var started bool
	for i := 0; i < 40 && !started; i++ {
		started, _ = s.record(i%5 != 4, now)
	}
	if !started {
		t.Fatal("80% failures over the window did not start a backoff")
	}
}
