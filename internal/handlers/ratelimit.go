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
type limiter struct {
	interval  time.Duration // between two requests at the rate
	tolerance time.Duration // how far ahead of the rate a request may go: (burst-1) intervals

	mu    sync.Mutex  // guards tat and holes
	tat   time.Time   // when the next request would be due at the rate
	holes []time.Time // slots given back before tat, in order; their time has not passed yet
}

// newLimiter returns a limiter of rate requests per second (positive) with
// bursts of burst requests (at least 1).
func newLimiter(rate float64, burst int) *limiter {
	iv := max(time.Duration(float64(time.Second)/rate), 1)
	return &limiter{interval: iv, tolerance: time.Duration(burst-1) * iv}
}

// reserve takes the next slot for a request made at now and returns how long
// the request must wait for it, and the slot, for cancel.
func (l *limiter) reserve(now time.Time) (time.Duration, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	passed := 0
	for passed < len(l.holes) && l.holes[passed].Before(now) {
		passed++ // unused: a slot is never taken late
	}
	l.holes = l.holes[passed:]
	var at time.Time
	if len(l.holes) > 0 {
		at, l.holes = l.holes[0], l.holes[1:]
	} else {
		at = l.tat
		if at.Before(now) {
			at = now
		}
		l.tat = at.Add(l.interval)
	}
	return max(at.Sub(now)-l.tolerance, 0), at
}

// cancel gives back the slot at, reserved and not used: the caller stopped
// waiting for it at now.
func (l *limiter) cancel(at, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if at.Before(now) {
		return // its time passed: nobody can take it any more
	}
	if !at.Add(l.interval).Equal(l.tat) {
		i, _ := slices.BinarySearchFunc(l.holes, at, time.Time.Compare)
		l.holes = slices.Insert(l.holes, i, at)
		return
	}
	// The last slot: the schedule moves back over it, and over the holes
	// that end up last.
	l.tat = at
	for n := len(l.holes); n > 0 && l.holes[n-1].Add(l.interval).Equal(l.tat); n-- {
		l.tat = l.holes[n-1]
		l.holes = l.holes[:n-1]
	}
}
