package receiver

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/metrics"
	"github.com/wowd/wowd/internal/tracing"
)

// The trace context and the span of a message (package tracing). Its
// tries' context carries the span context of the record's traceparent, or,
// with Options.Tracer, the message's span, a child of it. Without a tracer,
// a record without a valid traceparent costs a scan of its headers and
// nothing else; the hooks in job.go are one line each.

// jobTrace is the trace state of a job's record. It does not change once
// stored in job.trace: a new state replaces it.
type jobTrace struct {
	entered time.Time       // when the record entered its mailbox (with a tracer)
	ctx     context.Context // the partition's context with the message's span context: its tries' values
	span    trace.Span      // the message's span; nil without a tracer
}

// traceEnter notes when the record enters its mailbox, for its span.
func (j *job) traceEnter() {
	if j.r.o.Tracer != nil {
		j.trace.Store(&jobTrace{entered: time.Now()})
	}
}

// traceStart gives the job the trace context of its record, and starts its
// span with a tracer.
func (j *job) traceStart() {
	t := j.r.o.Tracer
	sc, ok := tracing.FromHeaders(j.msg.Headers)
	if t == nil {
		if ok {
			j.trace.Store(&jobTrace{ctx: tracing.Context(j.p.ctx, sc)})
		}
		return
	}
	entered := time.Now()
	if jt := j.trace.Load(); jt != nil && !jt.entered.IsZero() {
		entered = jt.entered
	}
	ctx, span := tracing.Start(j.p.ctx, t, sc, entered, &j.msg, j.r.o.GroupID)
	j.trace.Store(&jobTrace{ctx: ctx, span: span})
}

// traceValues returns the context whose values the job's tries carry, nil
// for the partition's own.
func (j *job) traceValues() context.Context {
	if jt := j.trace.Load(); jt != nil {
		return jt.ctx
	}
	return nil
}

// traceRetry records a retry of the job's message on its span.
func (j *job) traceRetry(attempt int, class handler.Class, err error, wait time.Duration) {
	if jt := j.trace.Load(); jt != nil && jt.span != nil {
		tracing.Retry(jt.span, attempt, class.String(), err, wait)
	}
}

// traceRetrying records a retry the handler reported (Retrying) on the
// span of m. Retries are rare: m's job is found by a scan of its
// partition, as extend does.
func (r *Receiver) traceRetrying(m *handler.Message, attempt int, err error, wait time.Duration) {
	if r.o.Tracer == nil {
		return
	}
	class, _ := handler.Classify(err)
	scan := func(p *partition) {
		if p == nil {
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		p.tr.jobs(func(j *job) {
			if &j.msg == m && j.token.Load()&1 == 1 {
				j.traceRetry(attempt, class, err, wait)
			}
		})
	}
	r.partsMu.RLock()
	p := r.parts[tp{m.Topic, m.Partition}]
	r.partsMu.RUnlock()
	scan(p)
	scan(r.local)
}

// traceEnd ends the span of the job's message with its outcome.
func (j *job) traceEnd(o metrics.Outcome) {
	jt := j.trace.Load()
	if jt == nil || jt.span == nil {
		return
	}
	// A final failure (dead-lettered, parked, rejected) says why in
	// j.failure; a record unroutable without dead letters has none.
	failed := j.failure.class != "" || o == metrics.Unroutable
	class := j.failure.class
	if class == "" && o == metrics.Unroutable {
		class = "unroutable"
	}
	tracing.End(jt.span, &j.msg, o.String(), failed, class, j.failure.reason)
}
