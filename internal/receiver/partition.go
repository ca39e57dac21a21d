package receiver

import (
	"context"
	"sync"
	"sync/atomic"
)

// partition is one incarnation of an owned partition: created on
// assignment, closed on revoke, loss or shutdown. Records and completions
// refer to their incarnation, never to (topic, partition), so a completion
// that arrives after its partition moved on changes nothing.
type partition struct {
	topic     string
	partition int32
	ctx       context.Context // given to handlers; canceled on close
	cancel    context.CancelFunc

	mu         sync.Mutex // guards tr, seqBuf, spanPaused, first, hwm
	tr         *tracker
	seqBuf     []int64 // scratch for admitPartition
	spanPaused bool    // paused on its own because tr.span() grew too long
	first      int64   // first offset delivered in this incarnation, -1 before
	hwm        int64   // high watermark seen on the last fetch

	committed int64 // last offset committed by this incarnation; guarded by Receiver.commitMu

	pending atomic.Int64 // records pushed, not finished or dropped
	closed  atomic.Bool
}

func newPartition(topic string, p int32) *partition {
	ctx, cancel := context.WithCancel(context.Background())
	return &partition{topic: topic, partition: p, ctx: ctx, cancel: cancel, tr: newTracker(), first: -1, committed: -1}
}

func (p *partition) isClosed() bool { return p.closed.Load() }

// close ends the incarnation: queued records of it are dropped when their
// turn comes, running handlers see their context canceled, late completions
// are ignored.
func (p *partition) close() {
	p.closed.Store(true)
	p.cancel()
}
