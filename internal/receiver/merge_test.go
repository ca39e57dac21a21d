package receiver

import (
	"testing"
	"time"

	"github.com/wowd/wowd/internal/park"
)

// A late state of a second parking of the same aggregate (written by a
// member that had lost the partition without knowing it) does not move the
// head past the first parking's messages: the earlier head is kept, and
// only what both count as resolved is. The same parking's progress
// replaces the state.
func TestLateSecondParkingKeepsTheEarlierHead(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	owner := &park.State{Aggregate: "agg", Offset: 103, Head: park.Position{Partition: 2, Offset: 40}, Since: t0, Class: "transient"}
	late := &park.State{Aggregate: "agg", Offset: 25, Head: park.Position{Partition: 2, Offset: 90}, Since: t0.Add(5 * time.Second), Class: "panic"}
	m := mergeParks(owner, late)
	if m.Head != owner.Head || !m.Since.Equal(owner.Since) || m.Class != owner.Class || m.Offset != 25 {
		t.Fatalf("merged %+v: want the owner's head, time and class, and offset 25", m)
	}
	if m2 := mergeParks(late, owner); m2.Head != owner.Head || m2.Offset != 25 {
		t.Fatalf("merged the other way round %+v: want the earlier head and offset 25", m2)
	}
	progress := *owner
	progress.Head.Offset, progress.Offset = 70, 200
	if m := mergeParks(owner, &progress); *m != progress {
		t.Fatalf("the parking's own progress %+v was merged into %+v", progress, m)
	}
	if m := mergeParks(nil, late); m != late {
		t.Fatal("a first parking was changed")
	}
}
