package sim

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The version-check mode: in a third of the seeds, drawn apart from the
// others (versionCheckFor), every record is a Wow event stream (world.value:
// aggregate key, version seq+1, id key/seq, as the ingest's messages are),
// and the members' receivers decode them (Options.Wow) and check their
// aggregate versions (Options.VersionCheck), parking an aggregate at a gap
// (OnGapPark) in the runs that park. What they did is read from their logs
// (logWatch), and checked:
//
//   - no false gap: an aggregate parked at a gap (version n after last
//     handled L) must miss each of the versions L+1..n-1 for real: none
//     of those messages has a record in the partition before the one
//     parked at (the ingest gave up on it or answered 502, handled
//     locally or not: never accepted into Kafka; or accepted only after
//     it, a stray copy). Every message of the run has one version and at
//     most one record in Kafka, and an aggregate's records are written to
//     one partition in the aggregate's order (a stray may come late, never
//     early). The owner's incarnation reads the partition in order from
//     where it started and trusts only what it learnt itself, or a local
//     record handled while it was open, and learns every record it passes
//     (handled, skipped by the handler or as a copy handled locally): a
//     record it failed parks the aggregate, and while parked no version is
//     checked. So a version between with a record before the one parked at
//     was either read and passed over, or, below where the incarnation
//     started, is older in the log than version L, which only a version
//     learnt out of turn explains. An operator's skip or discard makes a
//     hole on purpose, but it forgets the aggregate's version as it starts
//     (and a redrive hands the gap it parked at over anyway; one behind
//     it parks again, judged like any park at a gap), so the next version
//     is taken as it comes: it needs no allowance here, and gets none.
//     One allowance, documented (docs/operations.md, Rebalances): a park
//     behind the head of a redrive whose versions between were all
//     settled (handled, skipped by the handler, dead-lettered) and whose
//     records a client delivered again after it rewound the partition for
//     lost records. A member parked a redelivered message there, its held
//     copies of the aggregate's later messages went with the partition,
//     and the next owner started past them: the parked stream skips them,
//     though nothing is lost. Counted in the summary;
//   - no message lost to the duplicate check: a message skipped as a
//     duplicate (a version not above the last handled) never reaches the
//     handler, so it is not counted as handled; its position counts as
//     finished and settled only if the message itself, at any of its
//     positions, was handled, skipped by the handler, dead-lettered or
//     given up for good by the ingest by then; otherwise the skip lost it;
//   - no gap handed over unparked: in the runs that park (on-gap park), a
//     gap is handed to the handler anyway only as the head of a redrive,
//     so the aggregate parked at that version first (a gap behind the head
//     parks it again there). In the version-check seeds about one version
//     in lostVersionOneIn of the records produced straight is never
//     written, so that gaps also come behind parked heads;
//   - local records given up at a gap (documented, at the owner or not:
//     their copies go through the owner) and gaps handled anyway in a run
//     that does not park are counted only.

// versionCheckFor reports whether the seed runs in the version-check mode.
// Not from the run's rng: the other choices of a seed stay as they were.
func versionCheckFor(seed uint64) bool { return mix(seed, 87)%3 == 0 }

// versionSeen is what the version check did in a run. Under world.mu.
type versionSeen struct {
	duplicates    int // messages skipped as duplicates
	strayDups     int // of those, copies of messages the ingest gave up for good
	localGaps     int // local records given up at a gap
	handledAnyway int // gaps handled anyway (redriven, or without on-gap park)
	gapParks      []gapPark
	realGaps      int // parks at a gap found real (checkGapParksLocked)
	redriveGaps   int // of the parks at a gap, those behind the head of a redrive
	rewindGaps    int // of those, at versions settled and delivered again after a rewind for lost records (checkGapParksLocked)
}

// gapPark is an aggregate parked at a version gap.
type gapPark struct {
	member        int
	at            pos
	key           string
	version, last int64
	when          time.Time
	redrive       bool // behind the head of a redrive
}

// versionDuplicate records the message of key at version (at at, local
// records at partition -1) that member m skipped as a duplicate, last being
// the last version it handled: it settles its position only if the
// message was settled before, at any of its positions.
func (w *world) versionDuplicate(m *member, topicName string, at pos, key string, version, last int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	m.dupsLogged++
	member := m.id
	ks := keySeq{key, int(version - 1)}
	if topicName != topic || key == "" || version < 1 || last < version {
		w.violateLocked("member %d: a version duplicate the simulation cannot read: topic %q at %v aggregate %q version %d last handled %d", member, topicName, at, key, version, last)
		return
	}
	if at.p < 0 {
		l, ok := w.localAt[ks]
		if !ok {
			w.violateLocked("member %d skipped a local record of %s #%d the ingest never sent as a version duplicate", member, key, ks.seq)
			return
		}
		at = l
	} else if known, ok := w.keyOf[at]; ok && known != ks {
		w.violateLocked("member %d skipped %s #%d at %v as a version duplicate, but %s #%d is there", member, key, ks.seq, at, known.key, known.seq)
		return
	}
	w.ver.duplicates++
	w.finishLocked(at) // committable either way: no commit check fails for it after the violation below
	switch {
	case w.firstHandled[ks]:
	case w.gap[ks]:
		w.ver.strayDups++ // given up for good by the ingest: it may be lost
	case w.settledSeq[key][ks.seq]:
	default:
		w.violateLocked("member %d skipped %s #%d at %v as a version duplicate (version %d, last handled %d), but it was never handled, skipped or dead-lettered: lost to the duplicate check (%s)",
			member, key, ks.seq, at, version, last, w.historyLocked(at))
		return
	}
	w.settled[at] = true
}

// gapParked records the aggregate key that member m parked at the record at,
// of version, for a gap after last; checkGapParksLocked judges it once
// every record is known.
func (w *world) gapParked(m *member, topicName string, at pos, key string, version, last int64, redrive bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	m.gapsLogged++
	member := m.id
	if topicName != topic || key == "" || at.p < 0 || version <= last+1 || last < 0 {
		w.violateLocked("member %d: a park at a version gap the simulation cannot read: topic %q at %v aggregate %q version %d last handled %d", member, topicName, at, key, version, last)
		return
	}
	if redrive {
		w.ver.redriveGaps++
	}
	w.ver.gapParks = append(w.ver.gapParks, gapPark{member, at, key, version, last, time.Now(), redrive})
	w.eventLocked("member %d parks %s at %v: version %d after %d", member, key, at, version, last)
}

// parkedAtLocked reports whether an aggregate parked at version of key for
// a gap, by the log so far.
func (w *world) parkedAtLocked(key string, version int64) bool {
	for _, g := range w.ver.gapParks {
		if g.key == key && g.version == version {
			return true
		}
	}
	return false
}

// kafkaPosLocked returns where message ks is in the topic, if it is.
func (w *world) kafkaPosLocked(ks keySeq) (pos, bool) {
	if at, ok := w.msgAt[ks]; ok { // an ingest key's: its direct record or copy, else its local record
		return at, at.p >= 0
	}
	if ps := w.produced[ks.key]; ks.seq < len(ps) {
		return ps[ks.seq], true
	}
	return pos{}, false
}

// checkGapParksLocked checks every park at a version gap for a message
// really missing (see the top of the file).
func (w *world) checkGapParksLocked() {
	for _, g := range w.ver.gapParks {
		if ks, ok := w.keyOf[g.at]; !ok || ks != (keySeq{g.key, int(g.version - 1)}) {
			w.violateLocked("member %d parked %s at %v for a version gap (version %d), but the record there is %s #%d (known: %v)", g.member, g.key, g.at, g.version, ks.key, ks.seq, ok)
			continue
		}
		// The versions between (last+1 .. version-1) whose records the
		// owner should have read.
		var seen []string
		low := g.at.o
		afterRewind := g.redrive // so far: every version between seen settled (handled, skipped, dead-lettered), and delivered again after a rewind
		for s := int(g.last); s <= int(g.version)-2; s++ {
			if at, in := w.kafkaPosLocked(keySeq{g.key, s}); in && at.p == g.at.p && at.o < g.at.o {
				seen = append(seen, fmt.Sprintf("#%d at %v: %s", s, at, w.historyLocked(at)))
				low = min(low, at.o)
				afterRewind = afterRewind && w.settledSeq[g.key][s] && within(w.rewound[at.p], at.o)
			}
		}
		if len(seen) == 0 {
			w.ver.realGaps++
			continue
		}
		if afterRewind {
			// Documented (docs/operations.md, Rebalances): a member whose
			// client rewound the partition for lost records parked a
			// redelivered message, and its held copies of the aggregate's
			// later ones went with the partition; the parked stream skips
			// them, and its redrive parks at their versions. They were
			// settled (nothing is lost); the redrive hands the message
			// over at the next request.
			w.ver.rewindGaps++
			w.eventLocked("member %d's park of %s at %v (%.3fs), version %d after %d, allowed: the versions between are settled and were delivered again after a rewind (%s)",
				g.member, g.key, g.at, float64(g.when.Sub(start))/1e9, g.version, g.last, strings.Join(seen, "; "))
			continue
		}
		w.violateLocked("member %d parked %s at %v (%.3fs) for a version gap, version %d after %d, but %d of the versions between are in the partition before it: %s; the partition's commits between them: %s",
			g.member, g.key, g.at, float64(g.when.Sub(start))/1e9, g.version, g.last, len(seen), strings.Join(seen, "; "), w.commitsBetweenLocked(g.at.p, low, g.at.o))
	}
}

// versionSummaryLocked is the version check's part of a run's summary.
func (w *world) versionSummaryLocked() string {
	if !w.versionCheck {
		return "version check: off"
	}
	v := w.ver
	return fmt.Sprintf("version check: %d duplicates skipped (%d copies given up by the ingest), %d parks at a gap (%d real, %d in a redrive, %d of those at versions settled and delivered again after a rewind), %d local records given up at a gap, %d gaps handled anyway",
		v.duplicates, v.strayDups, len(v.gapParks), v.realGaps, v.redriveGaps, v.rewindGaps, v.localGaps, v.handledAnyway)
}

// commitsBetweenLocked lists the commits of partition p, as the broker
// received them, whose offsets lie in [from, to]: with a park at a gap,
// they show whether the group committed past the versions between, and
// when (a rewind commits lower offsets again).
func (w *world) commitsBetweenLocked(p int32, from, to int64) string {
	var in []string
	for _, c := range w.commitLog[p] {
		i := strings.LastIndex(c, ": ")
		o, err := strconv.ParseInt(c[i+2:], 10, 64)
		if err == nil && o >= from && o <= to {
			in = append(in, c)
		}
	}
	if len(in) == 0 {
		return "none"
	}
	return strings.Join(in, ", ")
}
