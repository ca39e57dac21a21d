// Package testwait is how tests wait for something to happen: they poll a
// condition until it holds or a time limit passes, and fail saying what they
// waited for. Every wait in the suite has the same shape:
//
//	testwait.For(t, 10*time.Second, "every record handled", func() bool { ... })
//
// Inside a testing/synctest bubble the polling sleeps on the fake clock, so
// a wait there costs no real time.
package testwait

import (
	"testing"
	"time"
)

// poll is how often a condition is checked.
const poll = 5 * time.Millisecond

// For polls cond until it returns true, and fails t if it still returns
// false after within.
func For(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(poll)
	}
}

// NoError polls cond until it returns nil, and fails t with cond's last
// error if it still returns one after within. every is how often cond is
// called (for conditions that cost a request, such as an HTTP call); 0
// means the default.
func NoError(t testing.TB, within, every time.Duration, what string, cond func() error) {
	t.Helper()
	if every <= 0 {
		every = poll
	}
	deadline := time.Now().Add(within)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %v", within, what, err)
		}
		time.Sleep(every)
	}
}
