package executor

import (
	"testing"
	"time"
)

// TopBacklogs feeds wowd_receiver_max_key_backlog ("Most messages waiting
// for a single aggregate ID of the receiver: a hot aggregate shows here")
// and the WowdHotAggregate alert. It counts only len(mb.in): once the
// aggregate's running task completes, settle moves every queued task of
// the mailbox to the owner's side (mb.local), where TopBacklogs no longer
// sees them. A hot aggregate with an asynchronous handler (every task
// returns Pending, as the receiver's jobs do) then reads 0 while nearly
// all of its messages still wait. Found by review.
func TestTopBacklogsCountsTasksWaitingBehindARunningTurn(t *testing.T) {
	const n = 50
	e := New(Options{Workers: 1})
	defer closeOK(t, e)
	g := e.Group(false)
	started := make(chan Resume, n)
	pending := fn(func(r Resume) Status { started <- r; return Pending })
	for range n {
		if err := g.Submit("hot", pending); err != nil {
			t.Fatal(err)
		}
	}
	wait := func() Resume {
		t.Helper()
		select {
		case r := <-started:
			return r
		case <-time.After(10 * time.Second):
			t.Fatal("no task started")
			return Resume{}
		}
	}
	first := wait()
	if top := TopBacklogs(1, g); len(top) != 1 || top[0].Tasks != n-1 {
		t.Fatalf("setup: while the first task runs, top backlogs %+v, want %d waiting", top, n-1)
	}
	first.Complete(false)
	second := wait() // running now (pending its completion); n-2 wait behind it
	var got int
	if top := TopBacklogs(1, g); len(top) > 0 {
		got = top[0].Tasks
	}
	if got != n-2 {
		t.Errorf("after one of %d tasks of one key finished, TopBacklogs reports %d waiting, want %d: "+
			"wowd_receiver_max_key_backlog hides a hot aggregate once its first message finished", n, got, n-2)
	}
	second.Complete(false)
	for range n - 2 {
		wait().Complete(false)
	}
}
