// Package signal lets goroutines wait for a condition that other goroutines
// change, without polling: the ones that change it call Notify, which costs
// an atomic load when nobody waits, and the waiters re-check the condition
// when woken.
package signal

import (
	"context"
	"sync"
	"sync/atomic"
)

// Signal wakes its waiters on Notify. The zero value is ready to use.
type Signal struct {
	waiters atomic.Int32 // goroutines in Wait

	mu sync.Mutex    // guards ch
	ch chan struct{} // closed by the next Notify; nil while nobody waits
}

// Notify wakes every goroutine waiting now. Call it after every change that
// may make a waiter's condition true.
func (s *Signal) Notify() {
	if s.waiters.Load() == 0 {
		return
	}
	s.mu.Lock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
	s.mu.Unlock()
}

// Wait returns when cond reports true (nil), or when ctx is done (its
// error). cond is checked first, then again after every Notify; it must be
// safe to call from the waiter's goroutine at any time.
func (s *Signal) Wait(ctx context.Context, cond func() bool) error {
	for {
		if cond() {
			return nil
		}
		s.waiters.Add(1)
		s.mu.Lock()
		if s.ch == nil {
			s.ch = make(chan struct{})
		}
		ch := s.ch
		s.mu.Unlock()
		// Checked again once registered: a change and its Notify that came
		// between the first check and the registration would be missed.
		if cond() {
			s.waiters.Add(-1)
			return nil
		}
		select {
		case <-ch:
			s.waiters.Add(-1)
		case <-ctx.Done():
			s.waiters.Add(-1)
			return ctx.Err()
		}
	}
}
