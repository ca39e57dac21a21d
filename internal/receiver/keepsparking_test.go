package receiver

import "testing"

// A parking is kept in the member's parked set when its write lands only if
// the partition is still this member's under the ownership it was written
// at. A park by hand kept it only while its own incarnation was open: a
// rewind under way (a new incarnation of the same ownership) left the
// aggregate unparked here while the state topic had it parked, so its
// next messages ran and a later redrive was refused as "not parked" (found
// by review; a failure's park, writeParked, already kept it).
func TestAParkingStaysWithTheIncarnationThatTookItsPlace(t *testing.T) {
	const epoch = 7
	open := func() *partition {
		p := newPartition(testTopic, 0)
		p.parkEpoch.Store(epoch)
		return p
	}
	closed := func() *partition {
		p := open()
		p.closed.Store(true)
		return p
	}
	for _, c := range []struct {
		name string
		p    *partition
		cur  func(p *partition) *partition // what parts holds for p's partition
		want bool
	}{
		{"open", open(), func(p *partition) *partition { return p }, true},
		{"revoked, draining (out of parts, still open)", open(), func(*partition) *partition { return nil }, true},
		{"rewound: the next incarnation of the same ownership", closed(), func(*partition) *partition { return open() }, true},
		{"lost", closed(), func(*partition) *partition { return nil }, false},
		{"lost and assigned again: a new ownership", closed(), func(*partition) *partition {
			q := open()
			q.parkEpoch.Store(epoch + 1)
			return q
		}, false},
		{"rewound, then the next incarnation lost too", closed(), func(*partition) *partition { return closed() }, false},
		{"closed in place by the stop", closed(), func(p *partition) *partition { return p }, false},
	} {
		r := &Receiver{park: &parkState{parked: map[parkKey]*parkedAgg{}}, parts: map[tp]*partition{}}
		if cur := c.cur(c.p); cur != nil {
			r.parts[tp{testTopic, 0}] = cur
		}
		got := r.lockKeepsParking(c.p, epoch)
		r.park.mu.Unlock()
		if got != c.want {
			t.Errorf("%s: kept %v, want %v", c.name, got, c.want)
		}
	}
}
