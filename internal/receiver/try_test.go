package receiver

import (
	"context"
	"errors"
	"testing"
)

// TestATryEndsWithItsPartition: once a try's Err reports its partition's
// end, its Done is closed, whether Done was asked for before or after, as a
// context's must. closePartition ends the tries of the jobs it finds a
// moment after it cancels the partition; a job whose handler saw Err in
// between and acknowledged is finished and gone by then, and its try was
// never ended: a handler that saw Err and then waited for Done waited
// forever (handler.WithRetry over a Blocker held a goroutine of the
// blocking pool so, found by the simulation's WithRetry mode, seed 29022).
func TestATryEndsWithItsPartition(t *testing.T) {
	for _, early := range []bool{true, false} {
		p := newPartition("t", 0)
		tc := newTry(p)
		var done <-chan struct{}
		if early {
			done = tc.Done() // a handler waiting since before the close
		}
		p.cancel() // closePartition, before it ends the tries it finds
		if err := tc.Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Err %v after the partition's cancel, want context.Canceled", err)
		}
		if !early {
			done = tc.Done()
		}
		select {
		case <-done:
		default:
			t.Errorf("Done asked for early=%v: not closed though Err reports %v", early, tc.Err())
		}
	}
	// Done alone, after the cancel, is closed too.
	p := newPartition("t", 0)
	tc := newTry(p)
	p.cancel()
	select {
	case <-tc.Done():
	default:
		t.Error("Done asked for after the partition's cancel is not closed")
	}
}
