package receiver

import "testing"

// The version table's trust rules, one incarnation against another. A
// false duplicate (a version taken for handled though nobody handled it)
// loses a message; these are the ways it could arise.

// TestALocalVersionTakenAsItComesIsNotTheOwners: after a reassign (q2),
// a local record trusts nothing q1 learnt and takes v6 as it comes. v5,
// produced straight to Kafka, may still be on its way to q2: q2 must not
// take it for a duplicate of 6.
func TestALocalVersionTakenAsItComesIsNotTheOwners(t *testing.T) {
	v := newVersions(16)
	k := parkKey{"t", "cart-1"}
	q1, local := newPartition("t", 0), newLocalPartition()
	v.handled(k, 4, q1, true)
	q1.closed.Store(true) // revoked, lost or rewound
	q2 := newPartition("t", 0)
	if _, _, ok := v.get(k, local); ok {
		t.Fatal("a local record trusts a closed incarnation's version")
	}
	v.handled(k, 6, local, false)
	if last, _, ok := v.get(k, q2); ok {
		t.Errorf("q2 trusts %d, which a local record took as it came: v5 would be skipped as a duplicate", last)
	}
	// Anchored: checked next to q2's own version, q2 trusts it.
	v.handled(k, 7, q2, true)
	last, anchored, ok := v.get(k, local)
	if !ok || last != 7 || !anchored {
		t.Fatalf("local reads (%d, %v, %v); want q2's 7, anchored", last, anchored, ok)
	}
	v.handled(k, 8, local, anchored)
	if last, _, ok := v.get(k, q2); !ok || last != 8 {
		t.Errorf("q2 reads (%d, %v); want the anchored local 8", last, ok)
	}
}

// TestALateHandlerOfAClosedIncarnationTeachesNothing: q1's handler of v9
// finishes after q2 learnt 10: q2 keeps 10 (so that v12 is a gap).
func TestALateHandlerOfAClosedIncarnationTeachesNothing(t *testing.T) {
	v := newVersions(16)
	k := parkKey{"t", "cart-1"}
	q1 := newPartition("t", 0)
	q1.closed.Store(true)
	q2 := newPartition("t", 0)
	v.handled(k, 10, q2, true)
	v.handled(k, 9, q1, true)
	if last, _, ok := v.get(k, q2); !ok || last != 10 {
		t.Errorf("q2 reads (%d, %v); want (10, true)", last, ok)
	}
}

// TestARedrivenVersionIsItsPartitions: a redriven message's version is
// learnt for its partition's incarnation.
func TestARedrivenVersionIsItsPartitions(t *testing.T) {
	v := newVersions(16)
	k := parkKey{"t", "cart-1"}
	q := newPartition("t", 0)
	rp := newLocalPartition()
	rp.partition, rp.of = 0, q
	v.handled(k, 7, rp, false)
	if last, _, ok := v.get(k, q); !ok || last != 7 {
		t.Errorf("q reads (%d, %v); want 7", last, ok)
	}
}

// TestTheOwnersLateCopyDoesNotSetBackALocalChain: v1..v3 of a new
// aggregate are ingested and handled here (v1 taken as it comes: the
// chain is not anchored); the owner, behind, then reads v1's marked copy.
// Its 1 replaced the local 3, and the ingested v4 was a false gap (parked
// with on-gap: park). Local records keep their 3; the owner, which does
// not trust it, learns its own versions once it reads past it.
func TestTheOwnersLateCopyDoesNotSetBackALocalChain(t *testing.T) {
	v := newVersions(16)
	k := parkKey{"t", "cart-1"}
	q, local := newPartition("t", 0), newLocalPartition()
	for n := int64(1); n <= 3; n++ {
		v.handled(k, n, local, false)
	}
	v.handled(k, 1, q, true) // the owner skips v1's marked copy, learning its version
	if last, _, ok := v.get(k, local); !ok || last != 3 {
		t.Fatalf("local reads (%d, %v) after handling 3 itself; want 3: v4 would be a false gap", last, ok)
	}
	if _, _, ok := v.get(k, q); ok {
		t.Error("the owner trusts the local chain it never anchored")
	}
	v.handled(k, 4, local, false)
	v.handled(k, 4, q, true) // caught up: its own, anchored
	if last, anchored, ok := v.get(k, local); !ok || last != 4 || !anchored {
		t.Errorf("local reads (%d, %v, %v) once the owner caught up; want its 4, anchored", last, anchored, ok)
	}
	if last, _, ok := v.get(k, q); !ok || last != 4 {
		t.Errorf("the owner reads (%d, %v); want its own 4", last, ok)
	}
}
