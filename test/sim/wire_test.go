package sim

import (
	"context"
	"encoding/binary"
	"net"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// memberWire reads a member's receiver's Kafka connections as its client
// writes them: the JoinGroup requests with which it rejoins the group
// (where an armed rejoin cut cuts it off, see rejoinCut).
type memberWire struct {
	w *world
	m *member

	// rejoinCut, when not 0, is how long the member is cut off the network
	// as it next rejoins the group under its member ID: the cut begins as
	// its JoinGroup is written (the write fails), after the revoke that
	// ended its session.
	rejoinCut atomic.Int64
}

// dial is the member's receiver's dialer: the member's network, read.
func (mw *memberWire) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := mw.m.net.dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &tapConn{Conn: c, mw: mw}, nil
}

// tapConn is one connection of the member's client, which writes to it
// from one goroutine at a time.
type tapConn struct {
	net.Conn
	mw  *memberWire
	out frames // requests, as written
}

func (c *tapConn) Write(p []byte) (int, error) {
	c.out.feed(p, 8, func(head []byte) bool {
		return int16(binary.BigEndian.Uint16(head)) == kmsg.JoinGroup.Int16()
	}, c.wrote)
	return c.Conn.Write(p)
}

// wrote sees a request written: a rejoin may be cut off.
func (c *tapConn) wrote(frame []byte, whole bool) {
	if len(frame) < 8 {
		return
	}
	key := int16(binary.BigEndian.Uint16(frame))
	version := int16(binary.BigEndian.Uint16(frame[2:]))
	switch {
	case key == kmsg.JoinGroup.Int16() && whole:
		req := kmsg.NewPtrJoinGroupRequest()
		req.Version = version
		r := kbin.Reader{Src: frame[8:]}
		r.NullableString() // the client ID
		if req.IsFlexible() {
			kmsg.SkipTags(&r)
		}
		if err := req.ReadFrom(r.Src); err != nil {
			c.mw.w.violate("member %d: a JoinGroup request the simulation cannot read: %v", c.mw.m.id, err)
			return
		}
		if req.MemberID != "" {
			c.mw.rejoining()
		}
	}
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
