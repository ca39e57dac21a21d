package receiver

import (
	"fmt"
	"sync"

	"go.uber.org/zap"

	"github.com/wowd/wowd/internal/metrics"
)

// The Wow version check (Options.VersionCheck): each event stream carries
// its aggregate's version, one more than the previous event's. The receiver
// keeps the last version handled per aggregate while the aggregate is
// active, and checks each event stream in its mailbox's order: one not
// above the last is a duplicate (a producer's retry, a replay), skipped;
// one past the next is a gap, logged and counted, and with OnGapPark the
// aggregate parks at it.
//
// "While active": the table holds at most versionsPerWindow entries per
// slot of the window; past that an arbitrary entry goes, and that
// aggregate's next version is taken as it comes.

// versionsPerWindow bounds the version table: entries per window slot.
const versionsPerWindow = 4

// versions is the table of last handled versions.
type versions struct {
	mu   sync.Mutex // guards last
	last map[parkKey]int64
	max  int
}

func newVersions(window int) *versions {
	return &versions{last: make(map[parkKey]int64), max: versionsPerWindow * window}
}

func (v *versions) get(k parkKey) (int64, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	n, ok := v.last[k]
	return n, ok
}

// handled records version n of k as handled.
func (v *versions) handled(k parkKey, n int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.last[k]; !ok && len(v.last) >= v.max {
		for old := range v.last { // an arbitrary entry: Go's map order
			delete(v.last, old)
			break
		}
	}
	if n > v.last[k] {
		v.last[k] = n
	}
}

// forget drops k's version: its history has a hole on purpose (a parked
// message skipped or discarded).
func (v *versions) forget(k parkKey) {
	v.mu.Lock()
	delete(v.last, k)
	v.mu.Unlock()
}

// checkVersion checks the job's event stream, of version n, against its
// aggregate's last handled version. It reports whether the job goes on to
// the handler; if not, the job was finished (a duplicate) or parked.
func (j *job) checkVersion(n int64) bool {
	r := j.r
	k := parkKey{j.rec.Topic, j.msg.AggregateID}
	last, ok := r.versions.get(k)
	j.version = n
	switch {
	case !ok || n == last+1:
		return true
	case n <= last:
		r.m.VersionDuplicate()
		r.log.Debug("event stream version already handled; skipped as a duplicate",
			zap.String("topic", j.rec.Topic), zap.Int32("partition", j.rec.Partition), zap.Int64("offset", j.rec.Offset),
			zap.String("aggregate", k.key), zap.Int64("version", n), zap.Int64("last_handled", last))
		j.finish(metrics.Skipped)
		return false
	}
	r.m.VersionGap()
	at := []zap.Field{zap.String("topic", j.rec.Topic), zap.Int32("partition", j.rec.Partition), zap.Int64("offset", j.rec.Offset),
		zap.String("aggregate", k.key), zap.Int64("version", n), zap.Int64("last_handled", last)}
	if r.o.OnGapPark && r.park != nil && j.p != r.local && !j.redriven {
		r.log.Warn("event stream version gap: parking the aggregate at it", at...)
		j.failure = failure{class: "version-gap", reason: fmt.Sprintf("version %d after %d: %d missing", n, last, n-last-1)}
		j.park()
		return false
	}
	r.log.Warn("event stream version gap: handled anyway", at...)
	return true
}

// versionHandled records the job's version as handled (or skipped by the
// handler), if it has one.
func (j *job) versionHandled() {
	if j.version > 0 && j.r.versions != nil {
		j.r.versions.handled(parkKey{j.rec.Topic, j.msg.AggregateID}, j.version)
	}
}
