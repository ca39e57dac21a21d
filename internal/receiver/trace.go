package receiver

import (
	"context"

	"github.com/wowd/wowd/internal/tracing"
)

// The trace context of a message (see package tracing): its tries' context
// carries the span context of the record's traceparent. A record without a
// valid one costs a scan of its headers and nothing else.

// jobTrace is the trace context of a job's message, made when its turn
// comes.
type jobTrace struct {
	ctx context.Context // the partition's context with the message's span context: its tries' values
}

// traceStart gives the job the trace context of its record, if it carries
// one.
func (j *job) traceStart() {
	sc, ok := tracing.FromHeaders(j.msg.Headers)
	if !ok {
		return
	}
	j.trace = &jobTrace{ctx: tracing.Context(j.p.ctx, sc)}
}

// traceValues returns the context whose values the job's tries carry, nil
// for the partition's own.
func (j *job) traceValues() context.Context {
	if j.trace == nil {
		return nil
	}
	return j.trace.ctx
}
