package receiver

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// A park by hand runs in its aggregate's mailbox and, after reading the
// parked topic's end (a round trip), bounds the aggregate's resolved records
// by a scan of its partition's tracker (resolvedBelow). A partition lost
// during that round trip drops its queued records, and their jobs went back
// to the pool while the closed incarnation's tracker still held them: the
// scan read the fields of jobs being given other records (the simulation,
// seed 5 with commit stalls, under -race: resolvedBelow against job.free
// after an abandon on the partition's loss), and the bound it wrote could be
// another record's offset. A closed tracker now lets every job go as it
// finishes or is dropped, and a closed incarnation gives no bound.
func TestAClosedIncarnationHoldsNoPooledJobAndGivesNoBound(t *testing.T) {
	r := &Receiver{log: zap.NewNop()}
	p := newPartition(testTopic, 0)
	var seqs []int64
	for off := int64(4); off < 7; off++ {
		j := &job{}
		j.r, j.p, j.rec = r, p, &kgo.Record{Topic: testTopic, Offset: off}
		j.msg.AggregateID = "agg-1"
		seqs = append(seqs, p.tr.push(off, 0, j))
		p.pending.Add(1)
		r.inFlight.Add(1)
	}
	if from, open := resolvedBelow(p, "agg-1"); !open || from != 4 {
		t.Fatalf("open, three records of agg-1 queued from offset 4: resolvedBelow = %d, %v; want 4, true", from, open)
	}

	p.closed.Store(true) // lost, as closePartition marks it
	r.forget(p, seqs[0]) // dropped at its turn, or by its retry's watch on the partition
	r.finished(p, seqs[1])
	var held []int64
	p.tr.jobs(func(j *job) { held = append(held, j.rec.Offset) })
	if len(held) != 1 || held[0] != 6 {
		t.Errorf("the closed tracker still holds the jobs of offsets %v; want only 6's, still running (the others went back to the pool)", held)
	}
	if from, open := resolvedBelow(p, "agg-1"); open {
		t.Errorf("a closed incarnation gave the bound %d: its dropped records are not in it any more", from)
	}
}
