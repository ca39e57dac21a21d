// Package metrics defines wowd's Prometheus metrics on a registry of its own
// and serves them with the health endpoints.
//
// Labels come only from bounded sets: dispatcher and context names from the
// configuration, handler types, and the fixed outcome values below. Never a
// key, a partition, a URL or error text.
//
// Every metric is described in [Descriptors], which generates
// docs/metrics.md.
package metrics

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Namespace prefixes every wowd metric.
const Namespace = "wowd"

// Outcome is what became of a message; the value of the outcome label.
type Outcome uint8

// Outcomes.
const (
	Handled          Outcome = iota // the handler acknowledged it
	Retried                         // an attempt failed and will be retried (counted per retry)
	DeadLettered                    // written to the dead-letter topic after a final failure
	Skipped                         // no handler wanted it, or the handler said skip
	Unroutable                      // no key, unknown topic or not a valid message of its topic: never given to a handler (dead-lettered when dead letters are on)
	Dropped                         // abandoned on revoke or shutdown; redelivered later
	Local                           // already handled when it was ingested (local first); acknowledged on return
	DeadLetterFailed                // failed for good, and its dead-letter write was refused for good: committed past, logged as an error
	Parked                          // written to the parked topic: it failed for good, or its aggregate was parked already
	Discarded                       // a parked message an operator's discard, or skip of the head, wrote to the dead-letter topic
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"handled", "retried", "dead_lettered", "skipped", "unroutable", "dropped", "local", "dead_letter_failed", "parked", "discarded"}

// String returns the label value.
func (o Outcome) String() string { return outcomeNames[o] }

// Metrics holds wowd's metrics and the registry they live in.
type Metrics struct {
	Registry *prometheus.Registry

	messages        *prometheus.CounterVec
	handlerDuration *prometheus.HistogramVec
	commits         *prometheus.CounterVec
	rebalances      *prometheus.CounterVec
	backoffs        *prometheus.CounterVec
	timeouts        *prometheus.CounterVec
	panics          *prometheus.CounterVec
	rewinds         *prometheus.CounterVec
	parkActions     *prometheus.CounterVec
	versionChecks   *prometheus.CounterVec
	receivers       *receiverCollector
	memoryLimit     prometheus.Gauge
	ingest          *prometheus.CounterVec
}

// New returns metrics registered on a new registry, together with the Go
// runtime and process collectors and wowd_build_info.
func New(version string) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "messages_total",
			Help: "Messages by what became of them (outcome: " + strings.Join(outcomeNames[:], ", ") + ").",
		}, []string{"dispatcher", "context", "outcome"}),
		handlerDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "handler_duration_seconds",
			Help: "Time from a message's start on a worker to its handler's acknowledgement, retries included.",
			// Up to half an hour: a try has a minute by default
			// (handler.timeout), and retries with their backoff count too.
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800},
		}, []string{"dispatcher", "handler"}),
		commits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "commits_total",
			Help: "Offset commits by result (result: ok, error).",
		}, []string{"dispatcher", "context", "result"}),
		rebalances: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "rebalance_events_total",
			Help: "Partitions assigned, revoked and lost (event: assigned, revoked, lost), counted per partition.",
		}, []string{"dispatcher", "context", "event"}),
		backoffs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "receiver_backoffs_total",
			Help: "Times a receiver started backing off because most recent handler attempts failed.",
		}, []string{"dispatcher", "context"}),
		timeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "handler_timeouts_total",
			Help: "Handler attempts not acknowledged within handler.timeout: each counts as a transient failure, and its late acknowledgement is ignored.",
		}, []string{"dispatcher", "context", "handler"}),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "handler_panics_total",
			Help: "Panics recovered from a handler: each fails its message permanently (class panic), unless the handler had reported the message's outcome before it panicked (that outcome stands).",
		}, []string{"dispatcher", "context", "handler"}),
		rewinds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "receiver_rewinds_total",
			Help: "Times the Kafka client rewound a partition because the broker reported records it had read as lost (truncated): the partition is delivered again from wow.kafka.start-offset.",
		}, []string{"dispatcher", "context"}),
		parkActions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "parked_actions_total",
			Help: "Actions on parked aggregates by result (action: park, redrive, skip, discard; result: done, failed, canceled). A park is done when an aggregate's first failed message was written to the parked topic, and failed when a park by hand is refused and at each retry of a message the parked topic refuses as too large (raise its max.message.bytes); a redrive that fails again leaves the aggregate parked with the new reason.",
		}, []string{"dispatcher", "context", "action", "result"}),
		versionChecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "version_checks_total",
			Help: "Event streams whose aggregate version did not follow the last one handled or left out by the filters of their aggregate (version-check; those the filters leave out are checked too; result: gap, a version missing before it; duplicate, not above the last, skipped).",
		}, []string{"dispatcher", "context", "result"}),
		receivers: newReceiverCollector(),
		ingest: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "ingest_requests_total",
			Help: "Requests to the ingest endpoint by answer (outcome: accepted, unauthorized, rejected, too_large, rate_limited, busy, unavailable, failed).",
		}, []string{"outcome"}),
		memoryLimit: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "memory_limit_bytes",
			Help: "The process's memory budget (wow.memory.limit, or its default): the Go runtime's soft memory limit, of which wow.memory.fetch-percent is for fetched records.",
		}),
	}
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "build_info",
		Help: "Always 1; the version label names the running build.",
	}, []string{"version"})
	buildInfo.WithLabelValues(version).Set(1)
	reg.MustRegister(m.messages, m.handlerDuration, m.commits, m.rebalances, m.backoffs, m.timeouts, m.panics, m.rewinds, m.parkActions, m.versionChecks, m.receivers, m.memoryLimit, m.ingest, buildInfo,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// IngestOutcome is the answer to an ingest request; the value of the outcome
// label of wowd_ingest_requests_total.
type IngestOutcome uint8

// Ingest outcomes.
const (
	IngestAccepted     IngestOutcome = iota // 202: admitted and published
	IngestUnauthorized                      // 401: no bearer token, or a wrong one (wow.ingest.token-file); 403: a browser's cross-origin request, or without a token one not addressed to a loopback host; nothing published
	IngestRejected                          // another 4xx: not a POST, an unknown kind, not a Wow message of a configured aggregate
	IngestUnavailable                       // 503: stopping, or admitted nowhere
	IngestFailed                            // 502: handled here, but the publish failed
	IngestTooLarge                          // 413: the body is larger than the endpoint takes
	IngestRateLimited                       // 429: over wow.ingest.rate-limit; nothing read
	IngestBusy                              // 503: wow.ingest.max-in-flight requests under way already; nothing read
	numIngestOutcomes
)

var ingestOutcomeNames = [numIngestOutcomes]string{"accepted", "unauthorized", "rejected", "unavailable", "failed",
	"too_large", "rate_limited", "busy"}

// String returns the label value.
func (o IngestOutcome) String() string { return ingestOutcomeNames[o] }

// Ingest counts the answers of the ingest endpoint. A nil *Ingest records
// nothing.
type Ingest struct {
	outcomes [numIngestOutcomes]prometheus.Counter
}

// Ingest returns the ingest endpoint's instruments.
func (m *Metrics) Ingest() *Ingest {
	in := &Ingest{}
	for o := range numIngestOutcomes {
		in.outcomes[o] = m.ingest.WithLabelValues(o.String())
	}
	return in
}

// Count records one request answered with outcome o.
func (in *Ingest) Count(o IngestOutcome) {
	if in != nil {
		in.outcomes[o].Inc()
	}
}

// MemoryLimit records the process's memory budget.
func (m *Metrics) MemoryLimit(bytes int64) { m.memoryLimit.Set(float64(bytes)) }

// Receiver returns the per-message instruments of one receiver, resolved
// once so the hot path does no label lookups. src is read at every scrape for
// the receiver's gauges.
func (m *Metrics) Receiver(dispatcher, context, handlerType string, src ReceiverSource) *Receiver {
	r := &Receiver{duration: m.handlerDuration.WithLabelValues(dispatcher, handlerType)}
	for o := range numOutcomes {
		r.outcomes[o] = m.messages.WithLabelValues(dispatcher, context, o.String())
	}
	r.commitOK = m.commits.WithLabelValues(dispatcher, context, "ok")
	r.commitErr = m.commits.WithLabelValues(dispatcher, context, "error")
	r.assigned = m.rebalances.WithLabelValues(dispatcher, context, "assigned")
	r.revoked = m.rebalances.WithLabelValues(dispatcher, context, "revoked")
	r.lost = m.rebalances.WithLabelValues(dispatcher, context, "lost")
	r.backoffs = m.backoffs.WithLabelValues(dispatcher, context)
	r.timeouts = m.timeouts.WithLabelValues(dispatcher, context, handlerType)
	r.panics = m.panics.WithLabelValues(dispatcher, context, handlerType)
	r.rewinds = m.rewinds.WithLabelValues(dispatcher, context)
	r.parkActions = m.parkActions.MustCurryWith(prometheus.Labels{"dispatcher": dispatcher, "context": context})
	r.versionGap = m.versionChecks.WithLabelValues(dispatcher, context, "gap")
	r.versionDup = m.versionChecks.WithLabelValues(dispatcher, context, "duplicate")
	if src != nil {
		m.receivers.add(dispatcher, context, src)
	}
	return r
}

// Executor exposes an executor's figures, read at every scrape.
func (m *Metrics) Executor(src ExecutorSource) {
	m.Registry.MustRegister(&executorCollector{src: src})
}

// Receiver holds one receiver's instruments. A nil *Receiver records nothing.
type Receiver struct {
	outcomes            [numOutcomes]prometheus.Counter
	duration            prometheus.Observer
	commitOK, commitErr prometheus.Counter
	assigned, revoked   prometheus.Counter
	lost, backoffs      prometheus.Counter
	timeouts, panics    prometheus.Counter
	rewinds             prometheus.Counter
	parkActions         *prometheus.CounterVec // curried: action, result
	versionGap          prometheus.Counter
	versionDup          prometheus.Counter
}

// VersionGap records an event stream whose version skipped past the next.
func (r *Receiver) VersionGap() {
	if r != nil {
		r.versionGap.Inc()
	}
}

// VersionDuplicate records an event stream whose version was handled already.
func (r *Receiver) VersionDuplicate() {
	if r != nil {
		r.versionDup.Inc()
	}
}

// Parking makes the parking series of a receiver that parks exist at 0
// (every action and result), so that rates and alerts see them from its
// start.
func (r *Receiver) Parking() {
	if r == nil {
		return
	}
	for _, a := range []string{"park", "redrive", "skip", "discard"} {
		for _, res := range []string{"done", "failed", "canceled"} {
			r.parkActions.WithLabelValues(a, res)
		}
	}
}

// ParkAction records an action on a parked aggregate (park, redrive, skip,
// discard) and its result (done, failed, canceled).
func (r *Receiver) ParkAction(action, result string) {
	if r != nil {
		r.parkActions.WithLabelValues(action, result).Inc()
	}
}

// Rewind records a partition the client rewound after lost records.
func (r *Receiver) Rewind() {
	if r != nil {
		r.rewinds.Inc()
	}
}

// Timeout records a handler attempt that ran past its deadline.
func (r *Receiver) Timeout() {
	if r != nil {
		r.timeouts.Inc()
	}
}

// Panic records a panic recovered from a handler.
func (r *Receiver) Panic() {
	if r != nil {
		r.panics.Inc()
	}
}

// Backoff records that the receiver started backing off.
func (r *Receiver) Backoff() {
	if r != nil {
		r.backoffs.Inc()
	}
}

// Count records n messages with outcome o.
func (r *Receiver) Count(o Outcome, n int) {
	if r != nil {
		r.outcomes[o].Add(float64(n))
	}
}

// HandlerDuration records one handler run.
func (r *Receiver) HandlerDuration(d time.Duration) {
	if r != nil {
		r.duration.Observe(d.Seconds())
	}
}

// Commit records a commit result.
func (r *Receiver) Commit(ok bool) {
	if r == nil {
		return
	}
	if ok {
		r.commitOK.Inc()
	} else {
		r.commitErr.Inc()
	}
}

// Assigned, Revoked and Lost record rebalance events of n partitions.
func (r *Receiver) Assigned(n int) {
	if r != nil {
		r.assigned.Add(float64(n))
	}
}

// Revoked records n revoked partitions.
func (r *Receiver) Revoked(n int) {
	if r != nil {
		r.revoked.Add(float64(n))
	}
}

// Lost records n lost partitions.
func (r *Receiver) Lost(n int) {
	if r != nil {
		r.lost.Add(float64(n))
	}
}
