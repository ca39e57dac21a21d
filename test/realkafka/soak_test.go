package realkafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/internal/kafkatest"
	"github.com/wowd/wowd/internal/proctest"
)

// The soak test's parameters. Only the duration changes between the short
// version (make test) and a long one (make soak): the rate, the faults and
// every bound stay the same.
const (
	// soakEnv names the duration of the run (a Go duration); unset, the run
	// lasts soakDefault.
	soakEnv     = "WOWD_SOAK"
	soakDefault = time.Minute

	soakRate       = 1000 // records produced per second
	soakAggregates = 3000
	// settle (proc_test.go) expects the topic to have crashPartitions
	// partitions.
	soakPartitions = crashPartitions
	soakProcs      = 3

	soakWarmup   = 5 * time.Second  // producing before the first fault
	soakCooldown = 5 * time.Second  // producing after the last fault
	soakSlot     = 40 * time.Second // one fault per slot of the run, at least four faults
	soakSample   = time.Second      // how often the group's commits are sampled

	soakBrokerDown = 3 * time.Second // the broker's down time, on top of its stop and start (10 s or more)
	soakFlapOn     = 5 * time.Second // a flap answers 503 this long, then 200 for soakFlapOff
	soakFlapOff    = 3 * time.Second

	// soakSessionTimeout is wow.kafka.session-timeout of configTemplate.
	soakSessionTimeout = 6 * time.Second
	// soakBrokerAfter: after the broker serves again, a member can still lose
	// its partitions because of the outage (its session expiring on the
	// reloaded coordinator, or its commit on revoke failing) until its
	// session timeout passed, plus a margin for the rejoin.
	soakBrokerAfter = soakSessionTimeout + 10*time.Second
	// soakWindowCap bounds a duplicate window whose commits never pass its
	// snapshot: a stalled group must not excuse the duplicates of the rest
	// of the run.
	soakWindowCap = 2 * time.Minute

	soakMaxDupRate  = 0.001 // duplicates outside fault windows per record (Knative's soak bound)
	soakStallMargin = 60 * time.Second

	// soakOverhead is what a run needs besides its duration: the broker's
	// start, the build, faults that run late, the catch-up, the stops.
	soakOverhead = 5 * time.Minute
)

// TestSoak runs three wowd processes against a broker of its own, fed about
// 1,000 Wow event-stream records a second over 12 partitions, for WOWD_SOAK
// (default one minute), through faults spread over the run, one at a time:
// rolling SIGTERM restarts, kill -9 and restart of a process, a sink that
// flaps between 503 and 200, and one broker stop and start. Then it stops
// producing, waits for the group to commit every partition to its end,
// stops the processes with SIGTERM and asserts:
//
//   - no record lost: each reached the sink, or the dead-letter topic;
//   - first deliveries of each aggregate in increasing seq (and offset) order;
//   - duplicates outside the windows of kill -9 and of the broker outage at
//     most 0.1% of the records (see faultWindow for the windows);
//   - no partition without commit progress, while it had records, for longer
//     than the longest fault plus a minute.
//
// It logs a report and a markdown table of the figures. With WOWD_SOAK unset
// it is part of make test; make soak runs it for SOAK (default 10m).
func TestSoak(t *testing.T) {
	began := time.Now()
	dur := soakDuration(t)
	if deadline, ok := t.Deadline(); ok && time.Until(deadline) < dur+soakOverhead {
		t.Fatalf("%s=%v needs %v more than that before the test deadline, but only %v are left: raise go test -timeout",
			soakEnv, dur, soakOverhead, time.Until(deadline).Round(time.Second))
	}
	plan := soakPlan(dur)

	b := startSoakBroker(t)
	e := newSoakEnv(t, b.addr)
	topic := e.topic("soak", "cart")
	dlq := topic + ".dlq"
	e.createTopic(topic, soakPartitions)
	s := newSoakSink(t)
	// A little latency, so that every SIGTERM and kill finds requests in
	// flight.
	s.rec.setLatency(time.Millisecond)
	cfg := e.config("soak", []string{"cart"}, s.URL())
	// The http sink's default: a record that keeps failing is dead-lettered
	// after five attempts, unless wowd backs off first, as it should when the
	// whole sink fails.
	cfg.MaxAttempts = 5
	c := newCluster(e, cfg)
	procs := c.startN(soakProcs)
	group := e.group("soak")

	var lines []string
	for _, f := range plan {
		lines = append(lines, fmt.Sprintf("%s at +%v", f.kind, f.at))
	}
	t.Logf("soak: %v at %d records/s over %d aggregates and %d partitions, %d wowd processes; faults: %s",
		dur, soakRate, soakAggregates, soakPartitions, soakProcs, strings.Join(lines, ", "))

	prod := startSoakProducer(t, e, topic)
	smp := startCommitSampler(t, e, s, group, topic)
	runStart := prod.start

	var faults []*faultWindow
	lastEnd := runStart
	for i, f := range plan {
		c.sleepUntil(runStart.Add(f.at))
		fw := &faultWindow{kind: f.kind, start: time.Now()}
		t.Logf("fault %d of %d at +%v: %s; %d produced, %d delivered", i+1, len(plan),
			since(runStart), f.kind, prod.acked.Load(), s.rec.delivered.Load())
		switch f.kind {
		case faultRoll:
			for j := range procs {
				c.stop(procs[j])
				if t.Failed() {
					c.fatalf("%s did not stop cleanly in a rolling restart", procs[j].name)
				}
				procs[j] = c.start()
				c.waitReady(procs[j], 2*time.Minute)
				settle(c, s.rec, procs)
			}
			fw.what = fmt.Sprintf("SIGTERM and restart of %d processes, one at a time", len(procs))
		case faultKill:
			j := e.rng.IntN(len(procs))
			fw.what = "kill -9 " + procs[j].name
			c.kill(procs[j])
			// What the killed process delivered and did not commit, the
			// next owner delivers again: the window closes once the group
			// committed past everything delivered up to now.
			fw.window, fw.snapAt, fw.snap = true, time.Now(), s.newestByPartition()
			procs[j] = c.start()
			c.waitReady(procs[j], 2*time.Minute)
			settle(c, s.rec, procs)
		case faultFlap:
			cycles := soakFlaps(dur)
			for range cycles {
				s.rec.setStatus(http.StatusServiceUnavailable)
				c.sleepUntil(time.Now().Add(soakFlapOn))
				s.rec.setStatus(0)
				c.sleepUntil(time.Now().Add(soakFlapOff))
			}
			fw.what = fmt.Sprintf("%d× (503 for %v, then 200 for %v)", cycles, soakFlapOn, soakFlapOff)
			settle(c, s.rec, procs)
		case faultBroker:
			took := b.restart(soakBrokerDown)
			fw.what = fmt.Sprintf("broker stopped, down %v, started: unavailable about %v", soakBrokerDown, took.Round(100*time.Millisecond))
			fw.window, fw.snapAt = true, time.Now().Add(soakBrokerAfter)
			for _, p := range procs {
				c.waitReady(p, 2*time.Minute)
			}
			settle(c, s.rec, procs)
		}
		fw.end = time.Now()
		lastEnd = fw.end
		faults = append(faults, fw)
		t.Logf("fault %d of %d: %s: %s, took %v", i+1, len(plan), fw.kind, fw.what, fw.end.Sub(fw.start).Round(time.Millisecond))
	}
	c.sleepUntil(latest(runStart.Add(dur), lastEnd.Add(soakCooldown)))

	// The end: stop producing, heal (every fault above ended healed: the
	// sink answers 200, the broker serves, every process is ready), and wait
	// for the group to catch up.
	prod.finish(t)
	producedFor := prod.stopped.Sub(runStart)
	ends := e.endOffsets(topic)
	records := sum(ends)
	switch acked, failed := prod.acked.Load(), prod.failed.Load(); {
	case records < acked || records > acked+failed:
		t.Errorf("end offsets add up to %d, the producer had %d records acknowledged and %d failed: the topic holds duplicates or gaps of the producer's own",
			records, acked, failed)
	case records > acked:
		// Failed records can be written all the same (their
		// acknowledgement was lost); the sink must get them like any.
		t.Logf("%d of the producer's %d failed records were written all the same", records-acked, failed)
	}
	// A group that does not catch up is what the soak is for: report it
	// with the rest instead of stopping here.
	caughtUp := time.Now()
	if err := waitCaughtUp(e, group, ends, 3*time.Minute); err != nil {
		t.Errorf("the group did not commit every partition to its end: %v", err)
	} else {
		t.Logf("the group committed every partition to its end %v after producing stopped", since(caughtUp))
	}
	smp.finish()
	var explained []string
	for _, line := range []string{"partitions lost", "revoke deadline passed", "unfinished at the shutdown deadline", "commit on revoke", "periodic commit", "record dead-lettered", "backing off"} {
		if n := c.grepAll(line); n > 0 {
			explained = append(explained, fmt.Sprintf("%q ×%d", line, n))
		}
	}
	c.stopAll()
	c.checkLogs()

	// What reached the sink, what went to the dead-letter topic.
	dead := readSoakDeadLetters(t, e, dlq, topic)
	_, lost := s.rec.missing(ends, dead, 0)
	lostList, _ := s.rec.missing(ends, dead, 10)
	e.checkCommittedDelivered(s.rec, group, dead)
	rep := s.rec.report()
	malformed := s.rec.badReqs.Load()
	orderViolations := rep.nViolation - int(malformed)

	// Duplicates, by the window their repeat delivery fell in.
	samples := smp.samples()
	for _, fw := range faults {
		if fw.window {
			fw.close(samples)
		}
	}
	dupTimes := s.duplicateTimes()
	var inKill, inBroker int
	for _, at := range dupTimes {
		if w := windowOf(faults, at); w == nil {
			continue
		} else if w.kind == faultKill {
			inKill++
		} else {
			inBroker++
		}
	}
	dups := len(dupTimes)
	outside := dups - inKill - inBroker
	rate := float64(outside) / float64(max(records, 1))

	// Commit progress. The samples must cover the run (all but the broker
	// outage), or the longest stall would mean nothing.
	if want := int(producedFor/soakSample) / 2; len(samples) < want {
		t.Errorf("commit sampler: %d samples over %v of producing, want at least %d (last error: %v)",
			len(samples), producedFor.Round(time.Second), want, smp.err())
	}
	st := longestStall(samples, soakPartitions)
	var longest *faultWindow
	for _, fw := range faults {
		if longest == nil || fw.end.Sub(fw.start) > longest.end.Sub(longest.start) {
			longest = fw
		}
	}
	stallBound := longest.end.Sub(longest.start) + soakStallMargin

	// The report, in one block.
	var r strings.Builder
	fmt.Fprintf(&r, "SOAK REPORT (WOWD_SOAK=%v; seed in the log above)\n", dur)
	fmt.Fprintf(&r, "  produced           %d records in %v (%.0f/s) over %d aggregates, %d partitions; %d producer errors\n",
		records, producedFor.Round(time.Second), float64(records)/producedFor.Seconds(), soakAggregates, soakPartitions, prod.failed.Load())
	fmt.Fprintf(&r, "  faults             %s\n", faultSummary(faults))
	for i, fw := range faults {
		fmt.Fprintf(&r, "    %2d. +%-8v %-8s %v  %s", i+1, fw.start.Sub(runStart).Round(100*time.Millisecond), fw.kind,
			fw.end.Sub(fw.start).Round(100*time.Millisecond), fw.what)
		if fw.window {
			fmt.Fprintf(&r, "; duplicate window %v%s", fw.closeAt.Sub(fw.start).Round(100*time.Millisecond), fw.note)
		}
		r.WriteString("\n")
	}
	fmt.Fprintf(&r, "  sink               %d requests, %d answered 503 (or another failure), %d distinct records delivered\n",
		s.rec.requests.Load(), s.rec.failed.Load(), s.rec.delivered.Load())
	fmt.Fprintf(&r, "  lost               %d %v\n", lost, lostList)
	fmt.Fprintf(&r, "  order violations   %d (first deliveries per aggregate); %d malformed requests\n", orderViolations, malformed)
	fmt.Fprintf(&r, "  dead letters       %d\n", len(dead))
	fmt.Fprintf(&r, "  duplicates         %d in all: %d in kill -9 windows, %d in the broker window, %d outside (%.4f%% of the records; bound %.1f%%)\n",
		dups, inKill, inBroker, outside, 100*rate, 100*soakMaxDupRate)
	fmt.Fprintf(&r, "  commit stall       longest %v (partition %d, ending at +%v); bound %v (longest fault, %s, + %v); %d of %d samples failed\n",
		st.longest.Round(100*time.Millisecond), st.partition, st.at.Sub(runStart).Round(time.Second), stallBound.Round(time.Second),
		longest.kind, soakStallMargin, smp.failures.Load(), len(samples)+int(smp.failures.Load()))
	fmt.Fprintf(&r, "  wowd logs          %s\n", orNone(strings.Join(explained, ", ")))
	fmt.Fprintf(&r, "  wall time          %v (setup %v)", since(began), runStart.Sub(began).Round(time.Second))
	t.Log(r.String())
	if len(rep.dupList) > 0 {
		t.Logf("first duplicates: %s", strings.Join(rep.dupList, ", "))
	}

	// The same figures as a markdown table, to copy.
	var m strings.Builder
	m.WriteString("| soak | result | bound |\n|---|---|---|\n")
	fmt.Fprintf(&m, "| duration (producing) | %v | |\n", producedFor.Round(time.Second))
	fmt.Fprintf(&m, "| records (aggregates, partitions) | %d (%d, %d) | |\n", records, soakAggregates, soakPartitions)
	fmt.Fprintf(&m, "| wowd processes | %d | |\n", soakProcs)
	fmt.Fprintf(&m, "| faults | %s | |\n", faultSummary(faults))
	fmt.Fprintf(&m, "| sink requests (answered 503) | %d (%d) | |\n", s.rec.requests.Load(), s.rec.failed.Load())
	fmt.Fprintf(&m, "| records lost | %d | 0 |\n", lost)
	fmt.Fprintf(&m, "| order violations (first deliveries) | %d | 0 |\n", orderViolations)
	fmt.Fprintf(&m, "| dead letters | %d | reported |\n", len(dead))
	fmt.Fprintf(&m, "| duplicates, all | %d | |\n", dups)
	fmt.Fprintf(&m, "| duplicates in kill -9 / broker windows | %d / %d | |\n", inKill, inBroker)
	fmt.Fprintf(&m, "| duplicates outside windows | %d (%.4f%%) | ≤ %.1f%% |\n", outside, 100*rate, 100*soakMaxDupRate)
	fmt.Fprintf(&m, "| longest commit stall | %v | < %v |\n", st.longest.Round(100*time.Millisecond), stallBound.Round(time.Second))
	fmt.Fprintf(&m, "| wall time | %v | |", since(began))
	t.Logf("soak results:\n%s", m.String())

	// The assertions.
	if n := prod.failed.Load(); n > 0 {
		// The test's own producer can lose records it cannot resend safely
		// when the broker goes away under it (kgo fails an idempotent
		// batch whose fate is unknown). That is the broker fault doing
		// what it should, not wowd: tolerated when every failure came
		// during the outage and they are under 1% of the load.
		prod.errMu.Lock()
		first, last := prod.firstFail, prod.lastFail
		prod.errMu.Unlock()
		inOutage := false
		for _, fw := range faults {
			if fw.kind == faultBroker && !first.Before(fw.start) && !last.After(fw.end.Add(soakBrokerAfter)) {
				inOutage = true
			}
		}
		if inOutage && float64(n) <= 0.01*float64(prod.issued.Load()) {
			t.Logf("producer: %d records not acknowledged, all during the broker outage (first error: %v); the load is that much short", n, prod.firstErr())
		} else {
			t.Errorf("producer: %d records not acknowledged between %v and %v (first error: %v); the run did not get the load it claims",
				n, first.Format(time.TimeOnly), last.Format(time.TimeOnly), prod.firstErr())
		}
	}
	if lost > 0 {
		t.Errorf("records lost: %d of %d never reached the sink nor the dead-letter topic, want 0; the first: %v", lost, records, lostList)
	}
	if orderViolations > 0 || malformed > 0 {
		t.Errorf("per-aggregate order: %d violations of first deliveries and %d malformed requests, want 0; the first:\n  %s",
			orderViolations, malformed, strings.Join(rep.violations, "\n  "))
	}
	if rate > soakMaxDupRate {
		t.Errorf("duplicates outside the kill -9 and broker windows: %d of %d records (%.4f%%), want at most %.1f%%; wowd logged %s",
			outside, records, 100*rate, 100*soakMaxDupRate, orNone(strings.Join(explained, ", ")))
	}
	if st.longest >= stallBound {
		t.Errorf("partition %d made no commit progress for %v while it had records (ending at +%v), want less than %v (the longest fault, %v, + %v)",
			st.partition, st.longest.Round(100*time.Millisecond), st.at.Sub(runStart).Round(time.Second), stallBound.Round(time.Second),
			longest.end.Sub(longest.start).Round(time.Second), soakStallMargin)
	}
	if d := s.rec.dups.Load(); d != int64(dups) {
		t.Errorf("the sink counted %d duplicates, its soak wrapper %d: the two must agree", d, dups)
	}
}

// waitCaughtUp waits until the group committed every partition to its end
// offset; the error names the partitions behind.
func waitCaughtUp(e *env, group string, ends map[tpKey]int64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := e.committed(group)
		if err == nil {
			var behind []string
			for _, tp := range sortedTPs(ends) {
				if c[tp] != ends[tp] {
					behind = append(behind, fmt.Sprintf("%d at %d of %d", tp.partition, c[tp], ends[tp]))
				}
			}
			if len(behind) == 0 {
				return nil
			}
			err = fmt.Errorf("partitions behind (committed of end): %s", strings.Join(behind, ", "))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("group %s after %v: %w", group, timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// soakDuration reads WOWD_SOAK.
func soakDuration(t *testing.T) time.Duration {
	t.Helper()
	v := strings.TrimSpace(os.Getenv(soakEnv))
	if v == "" {
		return soakDefault
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive Go duration such as 10m (%v)", soakEnv, v, err)
	}
	return d
}

// soakFlaps is how many 503 periods a flap has: two in the short run, three
// in longer ones.
func soakFlaps(d time.Duration) int {
	if d < 5*time.Minute {
		return 2
	}
	return 3
}

type faultKind string

const (
	faultRoll   faultKind = "roll"
	faultKill   faultKind = "kill -9"
	faultFlap   faultKind = "flap"
	faultBroker faultKind = "broker"
)

type plannedFault struct {
	kind faultKind
	at   time.Duration // from the start of producing
}

// soakPlan spreads the faults over the run: one per soakSlot (at least
// four, so that the short run has one of each), the broker outage once, in
// the middle, the others in turn. A fault that starts late (the one before
// it took longer than its slot) runs right after it.
func soakPlan(d time.Duration) []plannedFault {
	slots := max(4, int(d/soakSlot))
	span := max(d-soakWarmup-soakCooldown, 0)
	cycle := []faultKind{faultRoll, faultKill, faultFlap}
	plan := make([]plannedFault, slots)
	j := 0
	for i := range plan {
		plan[i].at = soakWarmup + span*time.Duration(i)/time.Duration(slots)
		if i == slots/2 {
			plan[i].kind = faultBroker
			continue
		}
		plan[i].kind = cycle[j%len(cycle)]
		j++
	}
	return plan
}

// faultWindow is one fault, and for kill -9 and the broker outage the
// window in which duplicates are expected. The window starts with the fault
// and closes at the first commit sample at or after snapAt in which the
// group committed, on every partition, past the newest offset the sink had
// received by snapAt. A duplicate is a record delivered before and not
// committed when its partition changed hands without a commit (a kill, a
// lost partition, a commit that failed during the outage); the next owner
// delivers it again before it can commit past it, so such repeats fall
// inside. For kill -9, snapAt is the moment the process is gone; for the
// broker, soakBrokerAfter after it serves again (the last moment the outage
// can still cost a member its partitions). A window is capped at
// soakWindowCap.
type faultWindow struct {
	kind       faultKind
	what       string
	start, end time.Time

	window  bool
	snapAt  time.Time
	snap    map[int32]int64 // newest offset delivered per partition by snapAt; nil: read from the samples
	closeAt time.Time
	note    string
}

// close sets closeAt from the commit samples.
func (fw *faultWindow) close(samples []commitSample) {
	snap := fw.snap
	i := 0
	for i < len(samples) && samples[i].at.Before(fw.snapAt) {
		i++
	}
	if snap == nil && i < len(samples) {
		snap = samples[i].newest
	}
	fw.closeAt, fw.note = time.Time{}, ""
	if snap != nil {
		for _, smp := range samples[i:] {
			passed := true
			for p, off := range snap {
				if c, ok := smp.committed[p]; !ok || c <= off {
					passed = false
					break
				}
			}
			if passed {
				fw.closeAt = smp.at
				break
			}
		}
	}
	if fw.closeAt.IsZero() || fw.closeAt.Sub(fw.start) > soakWindowCap {
		fw.closeAt, fw.note = fw.start.Add(soakWindowCap), " (capped: the commits never passed its snapshot)"
	}
}

// windowOf returns the duplicate window that holds at, if any.
func windowOf(faults []*faultWindow, at time.Time) *faultWindow {
	for _, fw := range faults {
		if fw.window && !at.Before(fw.start) && !at.After(fw.closeAt) {
			return fw
		}
	}
	return nil
}

func faultSummary(faults []*faultWindow) string {
	counts := make(map[faultKind]int)
	for _, fw := range faults {
		counts[fw.kind]++
	}
	return fmt.Sprintf("%d rolling restarts (%d SIGTERM), %d kill -9, %d sink flaps, %d broker stop/start",
		counts[faultRoll], counts[faultRoll]*soakProcs, counts[faultKill], counts[faultFlap], counts[faultBroker])
}

// sleepUntil waits until t, failing the test if a wowd process died.
func (c *cluster) sleepUntil(t time.Time) {
	c.t.Helper()
	for {
		c.checkAlive()
		d := time.Until(t)
		if d <= 0 {
			return
		}
		time.Sleep(min(d, 100*time.Millisecond))
	}
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func since(t time.Time) time.Duration { return time.Since(t).Round(100 * time.Millisecond) }

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// ---------------------------------------------------------------- broker

// soakBroker is the soak test's own broker: it goes down during the run,
// which the broker other tests share must not.
type soakBroker struct {
	t      *testing.T
	script string
	state  string
	addr   string
}

// startSoakBroker starts a broker with scripts/kafka-local, with a state file
// of its own, and stops it when the test ends (its watchdog stops it if the
// test process dies first). Without Java or the jars the test is skipped, or
// fails with WOWD_REQUIRE_KAFKA=1.
func startSoakBroker(t *testing.T) *soakBroker {
	t.Helper()
	root, err := proctest.RepoRoot()
	if err != nil {
		t.Fatalf("the soak test needs scripts/kafka-local: %v", err)
	}
	b := &soakBroker{t: t, script: filepath.Join(root, "scripts", "kafka-local"), state: filepath.Join(t.TempDir(), "kafka-local.state")}
	out, _, err := b.run(10*time.Minute, "start")
	if err == nil {
		b.addr, err = bootstrapOf(out)
	}
	if err != nil {
		if _, _, serr := b.run(2*time.Minute, "stop"); serr != nil {
			t.Logf("cleaning up after the failed start: %v", serr)
		}
		if os.Getenv(kafkatest.EnvRequire) == "1" {
			t.Fatalf("no Kafka broker of its own for the soak test (%s=1): %v", kafkatest.EnvRequire, err)
		}
		t.Skipf("no Kafka broker of its own for the soak test, skipping (set %s=1 to fail instead): %v", kafkatest.EnvRequire, err)
	}
	t.Cleanup(func() {
		if _, _, err := b.run(2*time.Minute, "stop"); err != nil {
			t.Errorf("the soak broker: %v", err)
		}
	})
	t.Logf("soak broker at %s (state %s)", b.addr, b.state)
	return b
}

// restart takes the broker down for down and brings it back with its data
// on its port; it returns how long the broker was unavailable, at most.
func (b *soakBroker) restart(down time.Duration) time.Duration {
	b.t.Helper()
	start := time.Now()
	out, progress, err := b.run(5*time.Minute, "restart", strconv.FormatFloat(down.Seconds(), 'f', -1, 64))
	if err == nil {
		var addr string
		if addr, err = bootstrapOf(out); err == nil && addr != b.addr {
			err = fmt.Errorf("the broker came back at %s, want its old address %s", addr, b.addr)
		}
	}
	if err != nil {
		b.t.Fatalf("broker stop and start: %v", err)
	}
	b.t.Logf("broker stop and start (from %s):\n%s", start.Format("15:04:05.000"), strings.TrimRight(progress, "\n"))
	return time.Since(start)
}

// run runs scripts/kafka-local with the broker's state file and returns its
// stdout and stderr (progress, timestamped); the error carries the stderr.
func (b *soakBroker) run(timeout time.Duration, args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{b.script}, args...)...)
	cmd.Env = append(os.Environ(),
		"KAFKA_LOCAL_STATE="+b.state,
		"KAFKA_LOCAL_WATCH_PID="+strconv.Itoa(os.Getpid()),
	)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &timestamped{w: &errOut}
	cmd.WaitDelay = 10 * time.Second
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out after %v: %w", timeout, err)
	}
	if err != nil {
		err = fmt.Errorf("scripts/kafka-local %s: %w\n%s", strings.Join(args, " "), err, tailLines(errOut.String(), 30))
	}
	return out.String(), errOut.String(), err
}

// timestamped prefixes each line written to w with the time, so that the
// script's progress shows how long each step took.
type timestamped struct {
	w       *bytes.Buffer
	midLine bool
}

func (ts *timestamped) Write(p []byte) (int, error) {
	for _, line := range bytes.SplitAfter(p, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		if !ts.midLine {
			ts.w.WriteString(time.Now().Format("15:04:05.000 "))
		}
		ts.w.Write(line)
		ts.midLine = line[len(line)-1] != '\n'
	}
	return len(p), nil
}

// bootstrapOf returns the address on the last line of kafka-local's stdout.
func bootstrapOf(out string) (string, error) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	a := strings.TrimSpace(lines[len(lines)-1])
	if _, _, err := net.SplitHostPort(a); err != nil {
		return "", fmt.Errorf("no bootstrap address in the output %q: %w", out, err)
	}
	return a, nil
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// newSoakEnv is newEnv on the soak test's own broker (newEnv takes the shared
// one).
func newSoakEnv(t *testing.T, brokers string) *env {
	t.Helper()
	e := &env{
		t:       t,
		brokers: brokers,
		seeds:   []string{brokers},
		id:      fmt.Sprintf("rksoak-%d", time.Now().UnixNano()%1e9),
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("random seed %d", seed)
	e.rng = rand.New(rand.NewPCG(seed, seed>>7))
	deadline, ok := t.Deadline()
	if !ok {
		deadline = time.Now().Add(2 * time.Hour)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(-30*time.Second))
	t.Cleanup(cancel)
	e.ctx = ctx
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds...), kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		t.Fatalf("admin client for %s: %v", brokers, err)
	}
	t.Cleanup(cl.Close)
	e.admCl = cl
	e.adm = kadm.NewClient(cl)
	wowdBinary(t)
	return e
}

// ---------------------------------------------------------------- sink

// soakSink is the package's sink (order checks, per-record delivery counts)
// with the times of duplicate deliveries, to place them in or outside the
// fault windows, and the newest offset delivered per partition.
type soakSink struct {
	rec *sink
	srv *httptest.Server

	mu     sync.Mutex
	counts map[int32][]uint8 // deliveries per offset, by partition; saturates at 255
	newest map[int32]int64
	dupAt  []time.Time
}

func newSoakSink(t *testing.T) *soakSink {
	s := &soakSink{
		// Its own server stays idle: wowd is pointed at s.srv, which
		// records each answer on the way through.
		rec:    newSink(t),
		counts: make(map[int32][]uint8),
		newest: make(map[int32]int64),
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve)) // listens on 127.0.0.1
	t.Cleanup(s.srv.Close)
	return s
}

func (s *soakSink) URL() string { return s.srv.URL + "/wow" }

// statusWriter remembers the status of the answer.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (s *soakSink) serve(w http.ResponseWriter, r *http.Request) {
	// The Kafka position is in the headers; the body is left to the sink.
	d, err := parseDelivery(r, nil)
	sw := &statusWriter{ResponseWriter: w}
	s.rec.serve(sw, r)
	if err != nil || sw.code < 200 || sw.code > 299 {
		return
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.counts[d.partition]
	if d.offset >= int64(len(c)) {
		c = slices.Grow(c, int(d.offset)+1-len(c))[:d.offset+1]
		s.counts[d.partition] = c
	}
	if c[d.offset] < 255 {
		c[d.offset]++
	}
	if c[d.offset] > 1 {
		s.dupAt = append(s.dupAt, now)
	}
	if n, ok := s.newest[d.partition]; !ok || d.offset > n {
		s.newest[d.partition] = d.offset
	}
}

func (s *soakSink) newestByPartition() map[int32]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int32]int64, len(s.newest))
	for p, o := range s.newest {
		out[p] = o
	}
	return out
}

func (s *soakSink) duplicateTimes() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.dupAt)
}

// ---------------------------------------------------------------- producer

// soakProducer produces soakRate records a second until finish, each a Wow
// event of a random aggregate with the aggregate's next seq.
type soakProducer struct {
	cl      *kgo.Client
	ctx     context.Context
	start   time.Time
	stopped time.Time

	issued, acked, failed atomic.Int64
	errMu                 sync.Mutex
	err                   error     // the first failure
	firstFail, lastFail   time.Time // when failures were reported

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

func startSoakProducer(t *testing.T, e *env, topic string) *soakProducer {
	t.Helper()
	// No limit on retries: during the broker outage the records wait in the
	// client (at most a minute's worth), in order (the producer is
	// idempotent), instead of failing.
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(e.seeds...),
		kgo.MetadataMinAge(250*time.Millisecond),
		kgo.ProducerLinger(10*time.Millisecond),
		kgo.MaxBufferedRecords(100_000),
		kgo.UnknownTopicRetries(-1),
	)
	if err != nil {
		t.Fatalf("producer for %s: %v", e.brokers, err)
	}
	p := &soakProducer{cl: cl, ctx: e.ctx, start: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(func() {
		p.halt()
		cl.Close()
	})
	seed := e.rng.Uint64()
	ctxName, aggregate := e.aggregateOf(topic)
	go func() {
		defer close(p.done)
		rng := rand.New(rand.NewPCG(seed, 2))
		seqs := make([]int64, soakAggregates)
		promise := func(_ *kgo.Record, err error) {
			if err != nil {
				p.failed.Add(1)
				p.errMu.Lock()
				if p.err == nil {
					p.err, p.firstFail = err, time.Now()
				}
				p.lastFail = time.Now()
				p.errMu.Unlock()
				return
			}
			p.acked.Add(1)
		}
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
			// Keep to the rate over the whole run, in bursts of at most half
			// a second's worth after a pause.
			due := int64(time.Since(p.start).Seconds()*soakRate) - p.issued.Load()
			for range min(due, soakRate/2) {
				a := rng.IntN(soakAggregates)
				key := "agg-" + strconv.Itoa(a)
				rec := &kgo.Record{Topic: topic, Key: []byte(key), Value: wowEvent(ctxName, aggregate, key, seqs[a], "")}
				seqs[a]++
				p.issued.Add(1)
				cl.Produce(p.ctx, rec, promise)
			}
		}
	}()
	return p
}

func (p *soakProducer) halt() {
	p.stopOnce.Do(func() { close(p.stop) })
	<-p.done
}

// finish stops producing and waits until every record is acknowledged or
// failed.
func (p *soakProducer) finish(t *testing.T) {
	t.Helper()
	p.halt()
	p.stopped = time.Now()
	ctx, cancel := context.WithTimeout(p.ctx, 2*time.Minute)
	defer cancel()
	if err := p.cl.Flush(ctx); err != nil {
		t.Fatalf("producer: %d records issued, %d acknowledged, %d failed, and not flushed after 2 minutes: %v",
			p.issued.Load(), p.acked.Load(), p.failed.Load(), err)
	}
}

func (p *soakProducer) firstErr() error {
	p.errMu.Lock()
	defer p.errMu.Unlock()
	return p.err
}

// ---------------------------------------------------------------- commits

// commitSample is one look at the group and the topic.
type commitSample struct {
	at        time.Time
	committed map[int32]int64 // by partition; absent: nothing committed yet
	ends      map[int32]int64
	newest    map[int32]int64 // the newest offset the sink had received
}

// commitSampler reads the group's committed offsets and the topic's end
// offsets every soakSample, until finish.
type commitSampler struct {
	mu       sync.Mutex
	list     []commitSample
	failures atomic.Int64
	lastErr  error

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

func startCommitSampler(t *testing.T, e *env, s *soakSink, group, topic string) *commitSampler {
	smp := &commitSampler{stop: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(smp.finish)
	go func() {
		defer close(smp.done)
		tick := time.NewTicker(soakSample)
		defer tick.Stop()
		for {
			select {
			case <-smp.stop:
				return
			case <-tick.C:
			}
			cs, err := sampleCommits(e, group, topic)
			if err != nil {
				// The broker outage: the gap shows in the samples.
				smp.failures.Add(1)
				smp.mu.Lock()
				smp.lastErr = err
				smp.mu.Unlock()
				continue
			}
			cs.newest = s.newestByPartition()
			smp.mu.Lock()
			smp.list = append(smp.list, cs)
			smp.mu.Unlock()
		}
	}()
	return smp
}

func sampleCommits(e *env, group, topic string) (commitSample, error) {
	ctx, cancel := context.WithTimeout(e.ctx, 3*time.Second)
	defer cancel()
	at := time.Now()
	fo, err := e.adm.FetchOffsets(ctx, group)
	if err == nil {
		err = fo.Error()
	}
	if err != nil {
		return commitSample{}, fmt.Errorf("offsets of group %s: %w", group, err)
	}
	lo, err := e.adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = lo.Error()
	}
	if err != nil {
		return commitSample{}, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	cs := commitSample{at: at, committed: make(map[int32]int64), ends: make(map[int32]int64)}
	fo.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.At >= 0 {
			cs.committed[o.Partition] = o.At
		}
	})
	lo.Each(func(o kadm.ListedOffset) { cs.ends[o.Partition] = o.Offset })
	if len(cs.ends) != soakPartitions {
		return commitSample{}, fmt.Errorf("end offsets of %s: %d partitions, want %d", topic, len(cs.ends), soakPartitions)
	}
	return cs, nil
}

func (smp *commitSampler) finish() {
	smp.stopOnce.Do(func() { close(smp.stop) })
	<-smp.done
}

func (smp *commitSampler) err() error {
	smp.mu.Lock()
	defer smp.mu.Unlock()
	return smp.lastErr
}

func (smp *commitSampler) samples() []commitSample {
	smp.mu.Lock()
	defer smp.mu.Unlock()
	return slices.Clone(smp.list)
}

type stall struct {
	longest   time.Duration
	partition int32
	at        time.Time // when it ended (or the last sample, if it did not)
}

// longestStall is the longest time between two samples that saw a
// partition's commit advance while it had records to consume: from a sample
// where its committed offset moved (or it had nothing to consume) to the
// next where it moved again. The resolution is the sampling interval, and
// samples that failed (the broker outage) count as no progress.
func longestStall(samples []commitSample, partitions int) stall {
	var worst stall
	if len(samples) == 0 {
		return worst
	}
	last := make([]int64, partitions) // committed offset at the last progress
	since := make([]time.Time, partitions)
	for p := range partitions {
		last[p] = -1
		since[p] = samples[0].at
	}
	for _, smp := range samples {
		for p := range int32(partitions) {
			c, ok := smp.committed[p]
			if !ok {
				c = -1
			}
			// Nothing committed yet (-1) on an empty partition is not behind.
			behind := c < smp.ends[p] && smp.ends[p] > 0
			moved := c != last[p]
			if d := smp.at.Sub(since[p]); (behind || moved) && d > worst.longest {
				worst = stall{longest: d, partition: p, at: smp.at}
			}
			if moved || !behind {
				last[p], since[p] = c, smp.at
			}
		}
	}
	return worst
}

// ---------------------------------------------------------------- dead letters

// readSoakDeadLetters reads the dead-letter topic from its start and returns
// the source positions of its records of topic.
func readSoakDeadLetters(t *testing.T, e *env, dlq, topic string) map[tpoKey]bool {
	t.Helper()
	out := make(map[tpoKey]bool)
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	lo, err := e.adm.ListEndOffsets(ctx, dlq)
	if err == nil {
		err = lo.Error()
	}
	if err != nil {
		t.Fatalf("end offsets of the dead-letter topic %s (wowd creates it at start): %v", dlq, err)
	}
	var want int64
	lo.Each(func(o kadm.ListedOffset) { want += o.Offset })
	if want == 0 {
		return out
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds...), kgo.ConsumeTopics(dlq),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		t.Fatalf("consumer of %s: %v", dlq, err)
	}
	defer cl.Close()
	var got int64
	var bad []string
	for got < want {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("dead-letter topic %s: read %d of its %d records in a minute: %v", dlq, got, want, err)
		}
		fs.EachError(func(tp string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("fetch %s[%d]: %v", tp, p, err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			got++
			h := make(map[string]string)
			for _, rh := range r.Headers {
				h[rh.Key] = string(rh.Value)
			}
			p, perr := strconv.ParseInt(h["wowd-dlq-source-partition"], 10, 32)
			o, oerr := strconv.ParseInt(h["wowd-dlq-source-offset"], 10, 64)
			if h["wowd-dlq-source-topic"] != topic || perr != nil || oerr != nil {
				bad = append(bad, fmt.Sprintf("%d@%d %v", r.Partition, r.Offset, h))
				return
			}
			out[tpoKey{topic, int32(p), o}] = true
		})
	}
	if len(bad) > 0 {
		t.Errorf("dead-letter topic %s: %d records without a source position in %s: %v", dlq, len(bad), topic, bad)
	}
	t.Logf("dead-letter topic %s: %d records, of %d distinct source records", dlq, got, len(out))
	return out
}
