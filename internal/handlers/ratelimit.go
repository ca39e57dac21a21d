package handlers

import (
	"sync"
	"time"
)

// limiter spaces requests out to a rate, letting a burst of them go at once
// after a quiet period: a token bucket, kept as the generic cell rate
// algorithm's single time (the theoretical arrival time of the next
// request). Callers reserve a slot and wait for it themselves, so the
// limiter holds no goroutine and a caller can give up waiting.
type limiter struct {
	interval  time.Duration // between two requests at the rate
	tolerance time.Duration // how far ahead of the rate a request may go: (burst-1) intervals

	mu  sync.Mutex // guards tat
	tat time.Time  // when the next request would be due at the rate
}

// newLimiter returns a limiter of rate requests per second (positive) with
// bursts of burst requests (at least 1).
func newLimiter(rate float64, burst int) *limiter {
	iv := max(time.Duration(float64(time.Second)/rate), 1)
	return &limiter{interval: iv, tolerance: time.Duration(burst-1) * iv}
}

// reserve takes the next slot for a request made at now and returns how long
// the request must wait for it. A reservation is not given back: a caller
// that gives up waiting leaves its slot unused.
func (l *limiter) reserve(now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	tat := l.tat
	if tat.Before(now) {
		tat = now
	}
	l.tat = tat.Add(l.interval)
	return max(tat.Sub(now)-l.tolerance, 0)
}
