package receiver

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/wowd/wowd/handler"
)

// streak watches the outcomes of a receiver's recent handler attempts. When
// most of them fail transiently (a sink or a dependency is down) the
// receiver backs off: it stops fetching for a delay that doubles with each
// failed probe, keeps retrying what it holds instead of dead-lettering it,
// and resumes on the first success. This keeps an outage from being met with
// full-speed retries or a dead-letter topic full of good messages.
type streak struct {
	mu      sync.Mutex // guards everything below
	ring    [streakWindow]bool
	n       int // outcomes recorded in ring, up to streakWindow
	next    int // ring position of the next outcome
	fails   int // failures among the recorded outcomes
	run     int // consecutive failures up to the latest outcome
	failing bool
	delay   time.Duration // current backoff; doubles per failed probe
	until   time.Time     // no fetching before this while failing
	ended   time.Time     // when the latest backoff ended; zero before any
	began   time.Time     // when the current (or latest) backoff began
	entered int           // times the receiver started backing off
	ends    int           // backoffs a success ended
	// runBy is the message whose failures alone make up the current run
	// (nil when it mixes messages or is empty); beganBy the one whose run
	// began the current backoff alone, nil if none did.
	runBy, beganBy *handler.Message

	// quiet is set while the ring is full of successes and the receiver is
	// not backing off: then another success changes nothing, and the
	// receiver skips it, without the lock or the clock (see unchangedBySuccess).
	quiet atomic.Bool
}

const (
	streakWindow   = 32
	streakMinimum  = 16  // outcomes needed before judging the share
	streakRatio    = 0.8 // failing share that starts a backoff
	streakRun      = 5   // consecutive failures that start a backoff (low traffic)
	streakMinDelay = time.Second
	streakMaxDelay = time.Minute
)

// record adds an outcome. It reports whether this outcome started a backoff
// (for logging) and whether it ended one.
func (s *streak) record(failed bool, m *handler.Message, now time.Time) (started, ended bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() { s.quiet.Store(!s.failing && s.fails == 0 && s.n == streakWindow) }()
	if s.n == streakWindow && s.ring[s.next] {
		s.fails--
	}
	s.ring[s.next] = failed
	s.next = (s.next + 1) % streakWindow
	s.n = min(s.n+1, streakWindow)
	if failed {
		s.fails++
		if s.run == 0 {
			s.runBy = m
		} else if s.runBy != m {
			s.runBy = nil
		}
		s.run++
	} else {
		s.run, s.runBy = 0, nil
	}
	switch {
	case s.failing && !failed:
		// A success: the sink is back.
		s.failing, s.delay, s.ended = false, 0, now
		s.ends++
		s.reset()
		return false, true
	case s.failing && failed && !now.Before(s.until):
		// The probe after the delay failed too: wait longer.
		s.delay = min(2*s.delay, streakMaxDelay)
		s.until = now.Add(s.delay)
	case !s.failing && (s.run >= streakRun || s.n >= streakMinimum && float64(s.fails) >= streakRatio*float64(s.n)):
		s.failing = true
		s.delay = streakMinDelay
		s.until = now.Add(s.delay)
		s.began, s.beganBy = now, nil
		if s.run >= streakRun {
			s.beganBy = s.runBy
		}
		s.entered++
		return true, false
	}
	return false, false
}

// unchangedBySuccess reports whether recording a success would change
// nothing (see quiet), so the caller can skip it; when false, the caller
// records it with record.
func (s *streak) unchangedBySuccess() bool { return s.quiet.Load() }

func (s *streak) reset() {
	s.ring = [streakWindow]bool{}
	s.n, s.next, s.fails, s.run = 0, 0, 0, 0
	s.runBy = nil
}

// hold reports whether fetching must wait, and until when.
func (s *streak) hold(now time.Time) (bool, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failing && now.Before(s.until), s.until
}

// holding reports whether a backoff's delay is under way at now.
func (s *streak) holding(now time.Time) bool {
	hold, _ := s.hold(now)
	return hold
}

// isFailing reports whether the receiver is backing off.
func (s *streak) isFailing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failing
}

// overlapped reports whether an attempt that started at start overlapped a
// backoff: one is under way, or one ended after the attempt started. Such an
// attempt's transient failure is the outage's, not the message's: it is
// held and retried like those reported during the backoff, even when the
// sink came back (and ended the backoff) before this failure was reported.
//
// Unless m's own failures alone began the backoff during this attempt, and
// m was held before and a success ended a backoff since (heldEnds is ends
// when it was first held): the sink answered others meanwhile, and a
// message failing on every try would otherwise begin a backoff with each
// try (a sink's retries of one message make a run), be held again, and
// never be dead-lettered or parked while the successes of others ended
// each backoff. A backoff others' failures began (the sink flapping) still
// holds it.
func (s *streak) overlapped(start time.Time, m *handler.Message, heldEnds int, held bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	own := held && s.ends > heldEnds && m != nil && s.beganBy == m && !s.began.Before(start)
	return s.failing && !own || s.ended.After(start)
}

// endCount returns how many backoffs a success ended so far.
func (s *streak) endCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ends
}

// idle ends a backoff whose delay passed with nothing left to probe it
// (the held messages ended otherwise: refused for good, skipped, their
// partition gone), as no success can: a later message's failure is its
// own again. It reports whether it ended one.
func (s *streak) idle(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.failing || now.Before(s.until) {
		return false
	}
	s.failing, s.delay, s.ended = false, 0, now
	s.reset()
	s.quiet.Store(false)
	return true
}

// current returns the backoff delay, 0 when not failing.
func (s *streak) current() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.delay
}
