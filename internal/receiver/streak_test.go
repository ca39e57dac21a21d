package receiver

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/wowd/wowd/handler"
)

func TestStreakBacksOffAndRecovers(t *testing.T) {
	var s streak
	now := time.Unix(0, 0)
	// Mostly successes: never backs off.
	for i := range 100 {
		if started, _ := s.record(i%5 == 0, nil, now); started {
			t.Fatalf("backed off at %d with 20%% failures", i)
		}
	}
	// Five failures in a row start a backoff.
	var started bool
	for i := 0; i < streakRun; i++ {
		started, _ = s.record(true, nil, now)
	}
	if !started || !s.isFailing() {
		t.Fatal("five consecutive failures did not start a backoff")
	}
	if hold, until := s.hold(now); !hold || until.Sub(now) != streakMinDelay {
		t.Fatalf("hold %v until %v", hold, until)
	}
	// A failed probe after the delay doubles it.
	now = now.Add(streakMinDelay)
	s.record(true, nil, now)
	if d := s.current(); d != 2*streakMinDelay {
		t.Fatalf("delay %v after a failed probe", d)
	}
	// Failures before the delay ends do not grow it.
	s.record(true, nil, now.Add(time.Millisecond))
	if d := s.current(); d != 2*streakMinDelay {
		t.Fatalf("delay %v", d)
	}
	// The first success ends it.
	if _, ended := s.record(false, nil, now); !ended || s.isFailing() {
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
		started, _ = s.record(i%5 != 4, nil, now)
	}
	if !started {
		t.Fatal("80% failures over the window did not start a backoff")
	}
}

// A success skipped while quiet must leave the streak exactly as recording it
// would: the same backoffs start and end at the same outcomes.
func TestStreakQuietSuccessChangesNothing(t *testing.T) {
	var full, fast streak
	now := time.Unix(0, 0)
	rng := rand.New(rand.NewPCG(3, 4))
	skipped := 0
	for i := range 20_000 {
		// Bursts of failures between long runs of successes.
		failed := (i/500)%4 == 3 && rng.IntN(10) < 9 || rng.IntN(200) == 0
		now = now.Add(50 * time.Millisecond)
		s1, e1 := full.record(failed, nil, now)
		var s2, e2 bool
		if !failed && fast.unchangedBySuccess() {
			skipped++
		} else {
			s2, e2 = fast.record(failed, nil, now)
		}
		if s1 != s2 || e1 != e2 || full.isFailing() != fast.isFailing() || full.current() != fast.current() {
			t.Fatalf("outcome %d (failed %v): full started/ended %v/%v failing %v, fast %v/%v failing %v",
				i, failed, s1, e1, full.isFailing(), s2, e2, fast.isFailing())
		}
	}
	if skipped < 10_000 || full.entered == 0 {
		t.Fatalf("skipped %d successes, %d backoffs: the test did not exercise both paths", skipped, full.entered)
	}
}

// An attempt overlapped a backoff if one is under way or ended after the
// attempt started; attempts started after the end did not. A message held
// before a success ended a backoff is not held by a backoff its own
// failures alone began during its attempt; one others began holds it.
func TestStreakOverlapped(t *testing.T) {
	var s streak
	m, other := &handler.Message{}, &handler.Message{}
	t0 := time.Unix(100, 0)
	fresh := func(start time.Time) bool { return s.overlapped(start, m, 0, false) }
	if fresh(t0) {
		t.Fatal("overlapped with no backoff ever")
	}
	for range streakRun {
		s.record(true, m, t0)
	}
	if !fresh(t0.Add(-time.Hour)) || !fresh(t0.Add(time.Second)) {
		t.Fatal("an attempt during a backoff did not overlap it")
	}
	held := s.endCount() // m held during the first backoff
	end := t0.Add(3 * time.Second)
	s.record(false, nil, end)
	if !fresh(end.Add(-time.Millisecond)) {
		t.Fatal("an attempt started before the backoff ended did not overlap it")
	}
	if fresh(end) || fresh(end.Add(time.Millisecond)) {
		t.Fatal("an attempt started after the backoff ended overlapped it")
	}
	// A second backoff begins at t1 by m's failures alone, during m's
	// attempt begun at end+1s.
	t1 := end.Add(2 * time.Second)
	for range streakRun {
		s.record(true, m, t1)
	}
	if !fresh(end.Add(time.Second)) {
		t.Fatal("a first attempt during which a backoff began did not overlap it")
	}
	if s.overlapped(end.Add(time.Second), m, held, true) {
		t.Fatal("m held, a success ended a backoff since: a backoff its own failures began during its attempt held it")
	}
	if !s.overlapped(end.Add(time.Second), other, held, true) {
		t.Fatal("a backoff m's failures began did not hold another held message")
	}
	if !s.overlapped(t1.Add(time.Second), m, held, true) {
		t.Fatal("m's attempt begun during the backoff did not overlap it")
	}
	if !s.overlapped(end.Add(time.Second), m, s.endCount(), true) {
		t.Fatal("m held after the last success's end: a backoff begun during its attempt did not hold it")
	}
	// A third, begun by failures of several messages (the sink flapping).
	s.record(false, nil, t1.Add(time.Second))
	t2 := t1.Add(5 * time.Second)
	for i := range streakRun {
		if i%2 == 0 {
			s.record(true, m, t2)
		} else {
			s.record(true, other, t2)
		}
	}
	if !s.overlapped(t2.Add(-time.Millisecond), m, held, true) {
		t.Fatal("a backoff others' failures took part in beginning did not hold m")
	}
}

// A backoff past its delay ends by idle; one within its delay does not.
func TestStreakIdle(t *testing.T) {
	var s streak
	t0 := time.Unix(100, 0)
	for range streakRun {
		s.record(true, nil, t0)
	}
	if s.idle(t0.Add(streakMinDelay / 2)) {
		t.Fatal("ended within its delay")
	}
	if !s.idle(t0.Add(streakMinDelay)) || s.isFailing() {
		t.Fatal("not ended past its delay")
	}
	if s.idle(t0.Add(time.Hour)) {
		t.Fatal("ended twice")
	}
}
