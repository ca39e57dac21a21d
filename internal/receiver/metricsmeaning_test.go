package receiver

import (
	"context"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/metrics"
	"github.com/wowd/wowd/internal/testwait"
)

// docs/metrics.md: wowd_receiver_max_key_backlog is "Most messages waiting
// for a single aggregate ID of the receiver: a hot aggregate shows here";
// WowdHotAggregate fires when it exceeds half the window. With a handler
// that acknowledges asynchronously (the http sink), 40 messages of one
// aggregate read 39 while the first runs, then 0 once it finished, while
// 38 still wait: executor.TopBacklogs counts only the mailbox's incoming
// tasks, not those its owner took over (Snapshot, receiver.go). Found by
// review.
func TestMaxKeyBacklogShowsAHotAggregate(t *testing.T) {
	const n = 40
	h := newHarness(t, 1)
	produce(t, h.c, testTopic, n, 1)
	acks := make(chan handler.Ack, n)
	hd := handlerFunc(func(_ context.Context, _ *handler.Message, ack handler.Ack) { acks <- ack })
	r := h.receiver("g-review-backlog", hd, 64)
	defer stop(t, r)
	next := func() handler.Ack {
		t.Helper()
		select {
		case a := <-acks:
			return a
		case <-time.After(10 * time.Second):
			t.Fatal("no handler call")
			panic("unreachable")
		}
	}
	first := next()
	testwait.For(t, 10*time.Second, "every record admitted", func() bool { return r.Snapshot().InFlight == n })
	if b := r.Snapshot().MaxKeyBacklog; b != n-1 {
		t.Fatalf("setup: while the first message runs, max key backlog %d, want %d", b, n-1)
	}
	first.Done(nil)
	second := next()
	s := r.Snapshot()
	if s.InFlight != n-1 {
		t.Fatalf("setup: in flight %d, want %d", s.InFlight, n-1)
	}
	if s.MaxKeyBacklog != n-2 {
		t.Errorf("wowd_receiver_max_key_backlog = %d with %d messages of one aggregate waiting behind the one running (in flight %d of window %d): "+
			"the hot aggregate WowdHotAggregate is for does not show", s.MaxKeyBacklog, n-2, s.InFlight, s.MaxInFlight)
	}
	second.Done(nil)
	for range n - 2 {
		next().Done(nil)
	}
}

// ruleOutcomes returns the outcome regexes of an alert's expression in
// deploy/prometheus/wowd.rules.yml, in order.
func ruleOutcomes(t *testing.T, alert string) []*regexp.Regexp {
	t.Helper()
	b, err := os.ReadFile("../../deploy/prometheus/wowd.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "- alert: "+alert+"\n")
	if !ok {
		t.Fatalf("no alert %s", alert)
	}
	if i := strings.Index(rest, "- alert: "); i >= 0 {
		rest = rest[:i]
	}
	var res []*regexp.Regexp
	for _, m := range regexp.MustCompile(`outcome=~"([^"]*)"`).FindAllStringSubmatch(rest, -1) {
		res = append(res, regexp.MustCompile("^(?:"+m[1]+")$"))
	}
	return res
}

// deploy/prometheus/wowd.rules.yml: WowdHandlerErrorRatio is the "Share of
// failing handler attempts (retries count as failed attempts)", its summary
// "<value> of handler attempts fail". It divides outcome=~"retried|
// dead_lettered" by outcome=~"handled|skipped|retried|dead_lettered". But
// with dead letters enabled, a record no handler can take (no key, an
// unknown topic, job.unroutable; or not a valid Wow message, job.reject)
// is dead-lettered without any handler attempt and counted as
// dead_lettered. A raw dispatcher whose handler never fails, fed 10 keyed
// and 10 keyless records, reads as "50% of handler attempts fail". Found by
// review.
func TestHandlerErrorRatioCountsOnlyHandlerAttempts(t *testing.T) {
	h := newHarness(t, 1)
	cl, err := kgo.NewClient(brokers(h.c)...)
	if err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for i := range 20 {
		rec := &kgo.Record{Topic: testTopic, Value: []byte("v")}
		if i%2 == 0 {
			rec.Key = []byte("agg-1")
		}
		recs = append(recs, rec)
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	var attempts atomic.Int64
	hd := handler.Sync(func(context.Context, *handler.Message) error { attempts.Add(1); return nil })
	m := metrics.New("test")
	r := h.receiver("g-review-ratio", hd, 16, func(o *Options) { o.Metrics = m })
	testwait.For(t, 30*time.Second, "the commit to reach the end", func() bool { return h.committedAtEnd("g-review-ratio") })
	stop(t, r)
	if attempts.Load() != 10 {
		t.Fatalf("setup: %d handler attempts, want 10", attempts.Load())
	}
	res := ruleOutcomes(t, "WowdHandlerErrorRatio")
	if len(res) != 2 {
		t.Fatalf("WowdHandlerErrorRatio: %d outcome selectors, want 2 (failing, all attempts)", len(res))
	}
	outcomes := m.Outcomes("d", "shop")
	sum := func(re *regexp.Regexp) (n float64) {
		for o, v := range outcomes {
			if re.MatchString(o) {
				n += v
			}
		}
		return n
	}
	failing, all := sum(res[0]), sum(res[1])
	if failing != 0 {
		t.Errorf("WowdHandlerErrorRatio reads %.0f%% of handler attempts failing (%v / %v; outcomes %v), "+
			"but the handler made %d attempts and none failed: the keyless records were dead-lettered without a handler attempt",
			100*failing/all, failing, all, outcomes, attempts.Load())
	}
}

// A receiver left without partitions while it backs off (every partition
// revoked, more members than partitions) has nothing to probe the sink
// with, and nothing ends its backoff until it gets some: it must not keep
// wowd_receiver_backing_off, and the critical WowdReceiverBackingOff, at 1
// as an idle member, nor a delay in wowd_receiver_backoff_seconds (0 when
// not backing off). It backs off again as soon as it owns a partition.
// Raised by review.
func TestAnIdleReceiverDoesNotReportBackingOff(t *testing.T) {
	h := newHarness(t, 1)
	r := h.receiver("g-idle-backoff", acking, 16)
	stop(t, r) // polls driven by hand: nothing is fetched
	r.stopping.Store(false)
	r.closing.Store(false)
	now := time.Now()
	for range streakRun {
		r.fails.record(true, nil, now)
	}
	if !r.fails.isFailing() {
		t.Fatal("setup: not backing off")
	}
	if s := r.Snapshot(); s.BackingOff || s.BackoffDelay != 0 {
		t.Errorf("wowd_receiver_backing_off = %v, wowd_receiver_backoff_seconds = %v for a receiver without partitions or records, want 0 and 0",
			s.BackingOff, s.BackoffDelay.Seconds())
	}
	r.onAssigned(context.Background(), r.cl, map[string][]int32{testTopic: {0}})
	if s := r.Snapshot(); !s.BackingOff || s.BackoffDelay <= 0 {
		t.Errorf("wowd_receiver_backing_off = %v, wowd_receiver_backoff_seconds = %v once the receiver owns a partition again, still backing off",
			s.BackingOff, s.BackoffDelay.Seconds())
	}
	r.closePartition(r.parts[tp{testTopic, 0}])
}

// The Kafka copy of a message this service handled when it was ingested
// (local first) was handled: wowd_executor_messages_total counts it
// completed, not failed, or a local-first service would show failures at
// its whole ingest rate while nothing fails. Raised by review.
func TestALocalCopyIsNotAnExecutorFailure(t *testing.T) {
	h := newHarness(t, 1)
	cl, err := kgo.NewClient(brokers(h.c)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	marked := []kgo.RecordHeader{{Key: HeaderHandledBy, Value: []byte("svc")}, {Key: HeaderHandledDispatchers, Value: []byte("d")}}
	for i := range 20 {
		rec := &kgo.Record{Topic: testTopic, Key: []byte{'k', byte('a' + i%4)}, Value: []byte{byte(i)}, Headers: marked}
		if err := cl.ProduceSync(t.Context(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	before := h.ex.Stats()
	m := metrics.New("test")
	r := h.receiver("g-local-not-failed", acking, 16, func(o *Options) { o.Metrics = m })
	testwait.For(t, 30*time.Second, "every copy finished", func() bool { return h.committedAtEnd("g-local-not-failed") })
	stop(t, r)
	if n := outcomeCount(t, m, "local"); n != 20 {
		t.Fatalf("outcome local %v, want 20 (setup: the copies are not recognised)", n)
	}
	if after := h.ex.Stats(); after.Failed != before.Failed {
		t.Errorf("wowd_executor_messages_total{state=\"failed\"} rose by %d for local copies, want 0", after.Failed-before.Failed)
	}
}
