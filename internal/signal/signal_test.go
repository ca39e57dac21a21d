package signal

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// Waiters see every change that makes their condition true, however the
// changes and the waits interleave.
func TestWaitersSeeTheChange(t *testing.T) {
	var s Signal
	var n atomic.Int64
	const target = 10_000
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := s.Wait(context.Background(), func() bool { return n.Load() >= target }); err != nil {
				t.Error(err)
			}
		})
	}
	for range 4 {
		wg.Go(func() {
			for range target / 4 {
				n.Add(1)
				s.Notify()
			}
		})
	}
	wg.Wait()
}

func TestWaitEndsWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s Signal
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		if err := s.Wait(ctx, func() bool { return false }); err != context.DeadlineExceeded {
			t.Fatalf("Wait = %v, want the deadline", err)
		}
		if d := time.Since(start); d != time.Second {
			t.Fatalf("waited %v, want exactly the deadline", d)
		}
		if n := s.waiters.Load(); n != 0 {
			t.Fatalf("%d waiters left registered", n)
		}
	})
}

func TestNotifyWithoutWaitersTakesNoLock(t *testing.T) {
	var s Signal
	s.mu.Lock() // a Notify that took the lock would block here
	done := make(chan struct{})
	go func() {
		s.Notify()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Notify without waiters blocked on the lock")
	}
	s.mu.Unlock()
}

func BenchmarkNotifyNoWaiters(b *testing.B) {
	var s Signal
	for range b.N {
		s.Notify()
	}
}
