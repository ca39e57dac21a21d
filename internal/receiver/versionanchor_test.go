package receiver

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A local (ingested) record's version is trusted by the owner's incarnation
// only if it was anchored: checked next to a version that incarnation could
// have seen. The anchor is read when the record is checked; its handler may
// finish much later, after a rebalance. These tests go through the job's
// check and record (checkVersion, versionHandled), as the receiver does.

// localVersionJob is a local record of key's event stream at the point the
// version check reads it.
func localVersionJob(r *Receiver, key string) *job {
	j := &job{}
	j.r, j.p = r, r.local
	j.rec = &kgo.Record{Topic: testTopic, Key: []byte(key)}
	j.msg.AggregateID = key
	return j
}

// TestALocalRecordAnchoredBeforeAReassignIsNotTheNextIncarnations: this
// member owns the partition (q1), which handled v5; v6 is ingested here and
// checked next to it (anchored). Its handler runs long: meanwhile the
// partition is revoked, another member owns it and handles v7 (produced
// while v6's copy waits for the local handler), and the partition comes
// back to this member (q2), from that member's commit past v7. v6's handler
// then finishes. The entry was stamped with the time it was recorded, after
// q2 opened, so q2 took 6 for its own last version and parked v8 as a gap
// "after 6" though v7 is in the partition before it.
func TestALocalRecordAnchoredBeforeAReassignIsNotTheNextIncarnations(t *testing.T) {
	r := &Receiver{versions: newVersions(16), local: newLocalPartition()}
	k := parkKey{testTopic, "cart-1"}
	q1 := newPartition(testTopic, 0)
	r.versions.handled(k, 5, q1, true)
	j := localVersionJob(r, "cart-1")
	if !j.checkVersion(6) || !j.versionAnchored {
		t.Fatalf("v6 next to q1's 5: anchored %v; want handed over, anchored", j.versionAnchored)
	}
	q1.closed.Store(true) // revoked; another member handles v7
	q2 := newPartition(testTopic, 0)
	j.versionHandled() // v6's local handler finishes only now
	if last, _, ok := r.versions.get(k, q2); ok {
		t.Errorf("q2 trusts %d, anchored to q1 before q2 opened: v8 would be a false gap (v7 was handled by the owner between)", last)
	}
	// Local records still follow their own chain.
	if last, _, ok := r.versions.get(k, r.local); !ok || last != 6 {
		t.Errorf("local reads (%d, %v); want 6", last, ok)
	}
}

// TestALocalChainAnchoredBeforeAReassignIsNotTheNextIncarnations: the same
// through a chain of local records. v6, anchored to q1's 5, is handled
// before the reassign; v7 is checked next to it only after q2 opened (it
// waited for the window): it inherits v6's anchor, which q2 could not
// have seen. Another member may have handled v8 in between (produced once
// v7 was stored, before v7 reached this member's mailbox), so q2 must not
// take 7 for its last version.
func TestALocalChainAnchoredBeforeAReassignIsNotTheNextIncarnations(t *testing.T) {
	r := &Receiver{versions: newVersions(16), local: newLocalPartition()}
	k := parkKey{testTopic, "cart-1"}
	q1 := newPartition(testTopic, 0)
	r.versions.handled(k, 5, q1, true)
	j6 := localVersionJob(r, "cart-1")
	if !j6.checkVersion(6) {
		t.Fatal("v6 not handed over")
	}
	j6.versionHandled()
	q1.closed.Store(true)
	q2 := newPartition(testTopic, 0)
	j7 := localVersionJob(r, "cart-1")
	if !j7.checkVersion(7) || !j7.versionAnchored {
		t.Fatalf("v7 next to the local 6: anchored %v; want handed over, anchored", j7.versionAnchored)
	}
	j7.versionHandled()
	if last, _, ok := r.versions.get(k, q2); ok {
		t.Errorf("q2 trusts %d, a local chain anchored to q1 before q2 opened: v9 would be a false gap", last)
	}
	// Once q2 learns a version of its own, a local record next to it is
	// anchored for q2.
	r.versions.handled(k, 9, q2, true)
	j10 := localVersionJob(r, "cart-1")
	if !j10.checkVersion(10) || !j10.versionAnchored {
		t.Fatal("v10 next to q2's 9: not anchored")
	}
	j10.versionHandled()
	if last, _, ok := r.versions.get(k, q2); !ok || last != 10 {
		t.Errorf("q2 reads (%d, %v); want the local 10, anchored to its own 9", last, ok)
	}
}

// TestALocalRecordFollowingAnIncarnationOpenedDuringItsCheckIsTrustedByIt:
// the check reads the clock, then looks the entry up; an incarnation of the
// partition can open in between and learn the aggregate's version (found
// by review). A local record anchored to that version must be trusted by
// that incarnation, or its next message is taken as it comes and a real gap
// (a version whose copy never reached Kafka) is not parked; a later
// incarnation must still not trust it.
func TestALocalRecordFollowingAnIncarnationOpenedDuringItsCheckIsTrustedByIt(t *testing.T) {
	now := incarnations.Load() // read by the check before the look-up
	q2 := newPartition(testTopic, 0)
	e := versionEntry{n: 5, p: q2, clock: incarnations.Load(), anchored: true}
	local := versionEntry{n: 6, p: newLocalPartition(), clock: e.anchorClock(now), anchored: true}
	if !local.validFor(q2) {
		t.Errorf("q2 does not trust the local 6 anchored to its own 5 (clock %d, q2 opened %d): its v8 would be taken as it comes, v7 missing", local.clock, q2.opened)
	}
	if q3 := newPartition(testTopic, 0); local.validFor(q3) {
		t.Errorf("q3, opened after the check, trusts the local 6 anchored to q2 (clock %d, q3 opened %d)", local.clock, q3.opened)
	}
}

// get returns k's last handled version as a record of incarnation q may
// trust it, and whether a local record next to it is anchored; an entry q
// may not trust is as none. The tests' reader of the table.
func (v *versions) get(k parkKey, q *partition) (last int64, anchored, ok bool) {
	e, ok := v.entry(k, q)
	return e.n, e.anchored, ok
}
