package handlers

import (
	"slices"
	"sync"
	"time"
)

// limiter spaces requests out to a rate, letting a burst of them go at once
// after a quiet period: a token bucket, kept as the generic cell rate
// algorithm's single time (the theoretical arrival time of the next
// request). Callers reserve a slot and wait for it themselves, so the
// limiter holds no goroutine and a caller can give up waiting.
//
// A caller that gives up gives its slot back (cancel). Kept, the slots of
// abandoned waits would push the schedule ahead of the clock: with more
// waiting attempts than the rate serves within a try's timeout, every try
// would reserve a slot past its own end, give up, and reserve again later,
// and the sink would send nothing at all. A slot given back is the next
// one reserved (a hole), unless it was the last, when the schedule moves
// back. Every request still goes at a slot the algorithm handed out, each
// slot used at most once, so the rate and burst hold as configured.
//
// A sink has one limiter for its life; a reload changes its rate and burst
// in place (set). The slots reserved ahead are void then: their waiters
// are told (slot.changed) and reserve again under the new settings, so
// that two schedules never run side by side (a lowered rate let the
// waiters of the old one go at its pace while new attempts went at the
// new one's, with a fresh burst), and a raised rate serves the attempts
// that waited on the old one too.
type limiter struct {
	mu        sync.Mutex    // guards everything below
	interval  time.Duration // between two requests at the rate; 0: no limit
	tolerance time.Duration // how far ahead of the rate a request may go: (burst-1) intervals
	tat       time.Time     // when the next request would be due at the rate
	holes     []time.Time   // slots given back before tat, in order; their time has not passed yet
	epoch     uint64        // counts set's changes: a slot of an earlier epoch is void
	changed   chan struct{} // closed by the next change
}

// slot is a reservation: its time, and what tells its waiter that a change
// of settings voided it.
type slot struct {
	at      time.Time
	epoch   uint64
	changed <-chan struct{}
}

// newLimiter returns a limiter of rate requests per second (0: no limit)
// with bursts of burst requests (at least 1).
func newLimiter(rate float64, burst int) *limiter {
	l := &limiter{changed: make(chan struct{})}
	l.interval, l.tolerance = limits(rate, burst)
	return l
}

// limits returns the interval and tolerance of rate (0: none) and burst.
func limits(rate float64, burst int) (interval, tolerance time.Duration) {
	if rate <= 0 {
		return 0, 0
	}
	iv := max(time.Duration(float64(time.Second)/rate), 1)
	return iv, time.Duration(max(burst, 1)-1) * iv
}

// set changes the rate (0: no limit) and burst at now. The schedule goes
// on from the last slot that may have been used by now (a waiter goes at
// its slot less the tolerance), at the new rate; the slots reserved after
// it are void, and their waiters are told.
func (l *limiter) set(rate float64, burst int, now time.Time) {
	iv, tol := limits(rate, burst)
	l.mu.Lock()
	defer l.mu.Unlock()
	if iv == l.interval && tol == l.tolerance {
		return
	}
	if l.interval > 0 && iv > 0 {
		last := l.tat.Add(-l.interval) // the last slot handed out
		if used := now.Add(l.tolerance); last.After(used) {
			last = used // later ones are waited for, not used
		}
		l.tat = last.Add(iv)
	} else {
		l.tat = time.Time{} // from or to no limit: nothing to go on from
	}
	l.interval, l.tolerance = iv, tol
	l.holes = nil
	l.epoch++
	close(l.changed)
	l.changed = make(chan struct{})
}

// reserve takes the next slot for a request made at now and returns how long
// the request must wait for it (0 without a limit), and the slot, for cancel.
func (l *limiter) reserve(now time.Time) (time.Duration, slot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := slot{epoch: l.epoch, changed: l.changed}
	if l.interval == 0 {
		return 0, s
	}
	passed := 0
	for passed < len(l.holes) && l.holes[passed].Before(now) {
		passed++ // unused: a slot is never taken late
	}
	l.holes = l.holes[passed:]
	if len(l.holes) > 0 {
		s.at, l.holes = l.holes[0], l.holes[1:]
	} else {
		s.at = l.tat
		if s.at.Before(now) {
			s.at = now
		}
		l.tat = s.at.Add(l.interval)
	}
	return max(s.at.Sub(now)-l.tolerance, 0), s
}

// cancel gives back s, reserved and not used: the caller stopped waiting
// for it at now.
func (l *limiter) cancel(s slot, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.epoch != l.epoch || l.interval == 0 || s.at.Before(now) {
		return // void since, or its time passed: nobody can take it any more
	}
	if !s.at.Add(l.interval).Equal(l.tat) {
		i, _ := slices.BinarySearchFunc(l.holes, s.at, time.Time.Compare)
		l.holes = slices.Insert(l.holes, i, s.at)
		return
	}
	// The last slot: the schedule moves back over it, and over the holes
	// that end up last.
	l.tat = s.at
	for n := len(l.holes); n > 0 && l.holes[n-1].Add(l.interval).Equal(l.tat); n-- {
		l.tat = l.holes[n-1]
		l.holes = l.holes[:n-1]
	}
}
