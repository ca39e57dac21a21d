package sim

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// memberWire reads a member's receiver's Kafka connections as its client
// writes and reads them: the commits it sends and the answers it reads
// (judged against its commit counter, see checkCommitCounts), and the
// JoinGroup requests with which it rejoins the group (where an armed
// rejoin cut cuts it off, see rejoinCut).
type memberWire struct {
	w *world
	m *member

	// rejoinCut, when not 0, is how long the member is cut off the network
	// as it next rejoins the group under its member ID: the cut begins as
	// its JoinGroup is written (the write fails), after the revoke that
	// ended its session.
	rejoinCut atomic.Int64

	mu sync.Mutex // guards what follows
	// last is the member's last OffsetCommit request written, on any
	// connection: its client sends a commit's requests one after another,
	// and its receiver sends one commit at a time.
	last *commitReq
	// okRead: answers read with no error for any partition. finalErr:
	// answers read with an error that ends the commit (franz-go retries
	// none of them: not a coordinator error in the first partition, which
	// it retries with the coordinator looked up again, and no
	// STALE_MEMBER_EPOCH, which it may retry with the member's new epoch).
	okRead, finalErr int
	// atOnce: when each answer without errors was written, of the ones
	// read at the very instant their request was written, by a commit
	// whose context cannot have ended then (see commitWritten).
	atOnce []time.Time
}

// commitReq is an OffsetCommit request the member's client wrote.
type commitReq struct {
	at      time.Time
	version int16
	// final: an answer that ended its commit was read (before a later
	// request was written, for the one that is last).
	final bool
	// atOnce: its commit's context cannot end at the instant it was
	// written (see commitWritten).
	atOnce bool
	// offsets are the offsets it commits of the simulation's topic, by
	// partition; answered, once an answer was read, failed, if that
	// answer had an error for any partition.
	offsets          map[int32]int64
	answered, failed bool
}

// commitTimeoutAtLeast is at most the receiver's commit timeout
// (commitTimeout in internal/receiver/commit.go, 10 s): a commit's context
// does not end within it of the commit's start.
const commitTimeoutAtLeast = 2 * time.Second

// dial is the member's receiver's dialer: the member's network, read.
func (mw *memberWire) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := mw.m.net.dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &tapConn{Conn: c, mw: mw, asked: map[int32]*commitReq{}}, nil
}

// tapConn is one connection of the member's client. Its client writes
// from one goroutine at a time and reads from one, so the two directions
// keep their own state; asked is shared, under mw.mu.
type tapConn struct {
	net.Conn
	mw    *memberWire
	out   frames               // requests, as written
	in    frames               // answers, as read
	asked map[int32]*commitReq // OffsetCommit requests not answered yet, by correlation ID
}

func (c *tapConn) Write(p []byte) (int, error) {
	c.out.feed(p, 8, func(head []byte) bool {
		key := int16(binary.BigEndian.Uint16(head))
		return key == kmsg.JoinGroup.Int16() || key == kmsg.OffsetCommit.Int16()
	}, c.wrote)
	return c.Conn.Write(p)
}

func (c *tapConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.feed(p[:n], 4, func(head []byte) bool {
		c.mw.mu.Lock()
		defer c.mw.mu.Unlock()
		_, ok := c.asked[int32(binary.BigEndian.Uint32(head))]
		return ok
	}, c.read)
	return n, err
}

// wrote sees a request written: an OffsetCommit is recorded, a rejoin may
// be cut off.
func (c *tapConn) wrote(frame []byte, whole bool) {
	if len(frame) < 8 {
		return
	}
	key := int16(binary.BigEndian.Uint16(frame))
	version := int16(binary.BigEndian.Uint16(frame[2:]))
	corr := int32(binary.BigEndian.Uint32(frame[4:]))
	switch {
	case key == kmsg.OffsetCommit.Int16():
		c.mw.commitWritten(c, corr, version, c.commitOffsets(frame, whole, version))
	case key == kmsg.JoinGroup.Int16() && whole:
		req := kmsg.NewPtrJoinGroupRequest()
		if !c.readRequest(frame, version, req) {
			return
		}
		if req.MemberID != "" {
			c.mw.rejoining()
		}
	}
}

// readRequest reads into req the body of a whole request frame of version
// (after its header: key, version, correlation ID, client ID, tags); a
// request it cannot read is a violation.
func (c *tapConn) readRequest(frame []byte, version int16, req kmsg.Request) bool {
	req.SetVersion(version)
	r := kbin.Reader{Src: frame[8:]}
	r.NullableString() // the client ID
	if req.IsFlexible() {
		kmsg.SkipTags(&r)
	}
	if err := req.ReadFrom(r.Src); err != nil {
		c.mw.w.violate("member %d: a %s request the simulation cannot read: %v", c.mw.m.id, kmsg.NameForKey(req.Key()), err)
		return false
	}
	return true
}

// commitOffsets reads the offsets an OffsetCommit request commits of the
// simulation's topic.
func (c *tapConn) commitOffsets(frame []byte, whole bool, version int16) map[int32]int64 {
	if !whole {
		return nil
	}
	req := kmsg.NewPtrOffsetCommitRequest()
	if !c.readRequest(frame, version, req) {
		return nil
	}
	out := map[int32]int64{}
	for _, t := range req.Topics {
		if t.Topic != topic && t.TopicID != c.mw.w.topicID {
			continue
		}
		for _, p := range t.Partitions {
			out[p.Partition] = p.Offset
		}
	}
	return out
}

// lastCommitOK reports whether the member's last OffsetCommit request
// written was answered without an error, and the member's network was not
// cut since it was written: a commit tried while the member is cut off is
// never written (its dial fails), so the last request written may be an
// older commit's than the one that failed (seed 1 with poison records: a
// revoke's drain ran out of time while its member was cut off, and its
// commit timed out dialing).
func (mw *memberWire) lastCommitOK() bool {
	mw.mu.Lock()
	ok := mw.last != nil && mw.last.answered && !mw.last.failed
	var at time.Time
	if ok {
		at = mw.last.at
	}
	mw.mu.Unlock()
	return ok && !mw.m.net.cutSince(at)
}

// commitWritten records an OffsetCommit request. An answer without errors
// read at the instant its request was written is counted ok by the commit
// that wrote it, unless that commit's context ended at that very instant
// (ended earlier, the client would have written nothing; ending later, it
// comes after the answer). A commit's context ends at the stop's deadline
// (the periodic commits', left out at the end) or its timeout after the
// commit began, which is not within commitTimeoutAtLeast when the commit
// began less than that before. It began after the member's previous
// request was written, unless that was an earlier try of its own, which
// it was not if an answer that ended a commit was read for it before this
// one was written; the member's first commit began after the member was
// made.
func (mw *memberWire) commitWritten(c *tapConn, corr int32, version int16, offsets map[int32]int64) {
	now := time.Now()
	mw.mu.Lock()
	defer mw.mu.Unlock()
	atOnce := mw.last == nil && now.Sub(mw.m.born) < commitTimeoutAtLeast ||
		mw.last != nil && mw.last.final && now.Sub(mw.last.at) < commitTimeoutAtLeast
	req := &commitReq{at: now, version: version, atOnce: atOnce, offsets: offsets}
	mw.last = req
	c.asked[corr] = req
}

// read sees an answer read, to an OffsetCommit request of this connection.
func (c *tapConn) read(frame []byte, whole bool) {
	if !whole || len(frame) < 4 {
		return
	}
	now := time.Now()
	mw := c.mw
	corr := int32(binary.BigEndian.Uint32(frame))
	mw.mu.Lock()
	req := c.asked[corr]
	delete(c.asked, corr)
	mw.mu.Unlock()
	if req == nil {
		return
	}
	resp := kmsg.NewPtrOffsetCommitResponse()
	resp.Version = req.version
	r := kbin.Reader{Src: frame[4:]}
	if resp.IsFlexible() {
		kmsg.SkipTags(&r)
	}
	if err := resp.ReadFrom(r.Src); err != nil {
		mw.w.violate("member %d: an OffsetCommit answer the simulation cannot read: %v", mw.m.id, err)
		return
	}
	ok, final := true, true
	committed := map[int32]int64{} // of the simulation's topic, answered without error
	for i, t := range resp.Topics {
		for j, p := range t.Partitions {
			if p.ErrorCode == 0 {
				if o, asked := req.offsets[p.Partition]; asked && (t.Topic == topic || t.TopicID == mw.w.topicID) {
					committed[p.Partition] = o
				}
				continue
			}
			ok = false
			err := kerr.ErrorForCode(p.ErrorCode)
			if p.ErrorCode == kerr.StaleMemberEpoch.Code ||
				i == 0 && j == 0 && (err == kerr.NotCoordinator || err == kerr.CoordinatorNotAvailable || err == kerr.CoordinatorLoadInProgress) {
				final = false
			}
		}
	}
	mw.w.committedBy(mw.m.id, req.at, committed)
	mw.mu.Lock()
	defer mw.mu.Unlock()
	req.final = final
	req.answered, req.failed = true, !ok
	switch {
	case ok:
		mw.okRead++
		if req.atOnce && now.Equal(req.at) {
			mw.atOnce = append(mw.atOnce, req.at)
		}
	case final:
		mw.finalErr++
	}
}

// checkCommitCounts checks, once the member stopped, its commit counter
// (wowd_commits_total) against the answers its client read: each commit
// counted ok read an answer without errors of its own; each answer read
// that ended a commit ended one of its own, counted ok or failed; each
// answer with an error that ended a commit was counted failed; each answer
// without errors read while its commit still waited for it was counted ok.
// stopDeadline is the deadline of the member's stop, which ends its
// periodic commits.
func (mw *memberWire) checkCommitCounts(stopDeadline time.Time) {
	m := mw.m
	ok := int(m.counter("wowd_commits_total", "result", "ok"))
	failed := int(m.counter("wowd_commits_total", "result", "error"))
	mw.mu.Lock()
	atOnce := len(mw.atOnce) - countTimes(mw.atOnce, stopDeadline)
	okRead, finalErr := mw.okRead, mw.finalErr
	mw.mu.Unlock()
	var wrong []string
	if ok > okRead {
		wrong = append(wrong, fmt.Sprintf("%d counted ok, but only %d of its answers were without errors", ok, okRead))
	}
	if ok < atOnce {
		wrong = append(wrong, fmt.Sprintf("%d counted ok, but %d answers without errors came while their commit waited", ok, atOnce))
	}
	if failed < finalErr {
		wrong = append(wrong, fmt.Sprintf("%d counted failed, but %d answers refused a commit for good", failed, finalErr))
	}
	if ok+failed < okRead+finalErr {
		wrong = append(wrong, fmt.Sprintf("%d counted in all, but %d answers ended a commit", ok+failed, okRead+finalErr))
	}
	if len(wrong) > 0 {
		mw.w.violate("member %d: its commit counter (wowd_commits_total) disagrees with what the broker answered it: %s",
			m.id, strings.Join(wrong, "; "))
	}
}

func countTimes(ts []time.Time, at time.Time) int {
	n := 0
	for _, t := range ts {
		if t.Equal(at) {
			n++
		}
	}
	return n
}

// rejoining sees the member rejoin the group under its member ID: an armed
// rejoin cut cuts it off now, before its JoinGroup reaches the
// coordinator.
func (mw *memberWire) rejoining() {
	m, w := mw.m, mw.w
	d := time.Duration(mw.rejoinCut.Swap(0))
	if d == 0 || m.crashed.Load() || m.stopping.Load() {
		return
	}
	w.mu.Lock()
	w.rejoinCuts++
	w.eventLocked("member %d cut off the network for %v as it rejoins the group", m.id, d)
	w.mu.Unlock()
	m.net.setCut(true) // the JoinGroup's write fails on the closed connection
	w.bg.Go(func() {
		time.Sleep(d)
		if !m.crashed.Load() {
			m.net.setCut(false)
		}
	})
}

// frames splits a stream of Kafka frames (each a 4-byte size, then that
// many bytes) as it passes, keeping of each frame its first head bytes, or
// all of it where want, asked with those, says so, and handing it to done
// once the frame has passed.
type frames struct {
	size    [4]byte
	nsize   int
	left    int // bytes of the current frame still to pass
	kept    []byte
	decided bool
	whole   bool
}

func (f *frames) feed(p []byte, head int, want func([]byte) bool, done func(frame []byte, whole bool)) {
	for len(p) > 0 {
		if f.nsize < 4 {
			n := copy(f.size[f.nsize:], p)
			f.nsize += n
			p = p[n:]
			if f.nsize < 4 {
				return
			}
			f.left = int(binary.BigEndian.Uint32(f.size[:]))
			f.kept, f.decided, f.whole = f.kept[:0], false, false
			if f.left <= 0 {
				f.nsize = 0
				done(nil, false)
			}
			continue
		}
		n := min(len(p), f.left)
		chunk := p[:n]
		p, f.left = p[n:], f.left-n
		if !f.decided {
			take := min(len(chunk), head-len(f.kept))
			f.kept = append(f.kept, chunk[:take]...)
			chunk = chunk[take:]
			if len(f.kept) == head || f.left == 0 {
				f.decided = true
				f.whole = len(f.kept) == head && want(f.kept)
			}
		}
		if f.whole {
			f.kept = append(f.kept, chunk...)
		}
		if f.left == 0 {
			f.nsize = 0
			done(f.kept, f.whole)
		}
	}
}
