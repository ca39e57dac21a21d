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

// The interleaving lockKeepsParking exists for: its look-up finds the
// incarnation open and in place, and before it takes park.mu a rewind puts
// a successor of the same ownership in its place and closes it (or the
// partition is lost, or the stop closes it in place). Deciding on that
// first look-up alone left a rewound partition's parking unkept here while
// the state topic had it parked.
func TestAParkingDecisionLooksAgainAfterAChangeBeforeItsLock(t *testing.T) {
	const epoch = 7
	successor := func(e int64, closed bool) *partition {
		q := newPartition(testTopic, 0)
		q.parkEpoch.Store(e)
		q.closed.Store(closed)
		return q
	}
	for _, c := range []struct {
		name string
		next *partition // what takes p's place in parts between the look-up and the lock; nil: nothing
		want bool
	}{
		{"rewound in between", successor(epoch, false), true},
		{"rewound in between, the successor already closed", successor(epoch, true), false},
		{"lost and assigned again in between", successor(epoch+1, false), false},
		{"lost in between", nil, false},
	} {
		p := newPartition(testTopic, 0)
		p.parkEpoch.Store(epoch)
		r := &Receiver{park: &parkState{parked: map[parkKey]*parkedAgg{}}, parts: map[tp]*partition{{testTopic, 0}: p}}
		looks := 0
		hook := func() {
			looks++
			if looks > 1 {
				return
			}
			r.partsMu.Lock()
			if c.next != nil {
				r.parts[tp{testTopic, 0}] = c.next // a rewind places its successor, then closes p
			} else {
				delete(r.parts, tp{testTopic, 0})
			}
			r.partsMu.Unlock()
			p.closed.Store(true)
		}
		testHookKeepsParking.Store(&hook)
		got := r.lockKeepsParking(p, epoch)
		r.park.mu.Unlock()
		testHookKeepsParking.Store(nil)
		if got != c.want || looks != 2 {
			t.Errorf("%s: kept %v after %d look-ups, want %v after 2", c.name, got, looks, c.want)
		}
	}

	// The stop closes p in place: the second look-up finds it again and
	// the loop ends there, unkept.
	p := newPartition(testTopic, 0)
	p.parkEpoch.Store(epoch)
	r := &Receiver{park: &parkState{parked: map[parkKey]*parkedAgg{}}, parts: map[tp]*partition{{testTopic, 0}: p}}
	looks := 0
	hook := func() {
		looks++
		p.closed.Store(true)
	}
	testHookKeepsParking.Store(&hook)
	t.Cleanup(func() { testHookKeepsParking.Store(nil) })
	got := r.lockKeepsParking(p, epoch)
	r.park.mu.Unlock()
	if got || looks != 2 {
		t.Errorf("closed in place by the stop in between: kept %v after %d look-ups, want false after 2", got, looks)
	}
}
