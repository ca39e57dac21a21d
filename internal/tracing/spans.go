package tracing

import (
	"context"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/wowd/wowd/handler"
)

// The span of a message: one per record a receiver admits, from its entry
// into its aggregate's mailbox to its acknowledgement (handled, skipped,
// dead-lettered, parked; or dropped, to be delivered again), a consumer span named
// "process <topic>" with the messaging semantic conventions (semconv
// v1.43.0). Its parent is the record's trace context, when it carries a
// valid one. Retries are events on it; a message that failed for good ends
// it with an error status and error.type = its failure class.

// Attributes of wowd's own, beside the semantic conventions.
const (
	AttrDispatcher = attribute.Key("wowd.dispatcher")
	AttrOutcome    = attribute.Key("wowd.outcome")      // handled, skipped, dead_lettered, …: the outcome label of wowd_messages_total
	AttrWowTraceID = attribute.Key("wow.trace_id")      // the Wow message's trace_id header entry
	AttrAttempt    = attribute.Key("wowd.attempt")      // on retry events: the attempt that failed
	AttrRetryWait  = attribute.Key("wowd.retry.wait_s") // on retry events: seconds until the next attempt

	EventRetry = "retry"
)

// maxErrorText bounds the error text an event or status carries.
const maxErrorText = 256

// maxKeyText bounds the record key a span carries: keys of any length
// would make a batch of spans larger than a collector takes (an
// OTLP/gRPC receiver refuses a message over 4 MiB by default), and every
// span of the batch would be lost with it.
const maxKeyText = 256

// Start starts the span of message m of consumer group group, which
// entered its mailbox at entered, as a child of sc when sc is valid. It
// returns ctx with the span.
func Start(ctx context.Context, t trace.Tracer, sc trace.SpanContext, entered time.Time, m *handler.Message, group string) (context.Context, trace.Span) {
	if sc.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	attrs := []attribute.KeyValue{
		semconv.MessagingSystemKafka,
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingOperationName("process"),
		semconv.MessagingDestinationName(m.Topic),
		semconv.MessagingDestinationPartitionID(strconv.FormatInt(int64(m.Partition), 10)),
		semconv.MessagingKafkaOffset(int(m.Offset)),
		semconv.MessagingConsumerGroupName(group),
		semconv.MessagingMessageBodySize(len(m.Value)),
		AttrDispatcher.String(m.Dispatcher),
	}
	if m.AggregateID != "" && utf8.ValidString(m.AggregateID) {
		attrs = append(attrs, semconv.MessagingKafkaMessageKey(truncate(m.AggregateID, maxKeyText)))
	}
	return t.Start(ctx, "process "+m.Topic,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(entered),
		trace.WithAttributes(attrs...))
}

// Retry records on span that attempt failed with err, of class class,
// and the message is tried again after wait.
func Retry(span trace.Span, attempt int, class string, err error, wait time.Duration) {
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{
		AttrAttempt.Int(attempt),
		AttrRetryWait.Float64(wait.Seconds()),
		semconv.ErrorTypeKey.String(class),
	}
	if err != nil {
		attrs = append(attrs, semconv.ExceptionMessage(truncate(err.Error(), maxErrorText)))
	}
	span.AddEvent(EventRetry, trace.WithAttributes(attrs...))
}

// End ends span with the message's outcome: failed (dead-lettered, or
// unroutable) with class and reason, or not.
func End(span trace.Span, m *handler.Message, outcome string, failed bool, class, reason string) {
	if span.IsRecording() {
		attrs := []attribute.KeyValue{AttrOutcome.String(outcome)}
		if w := m.Wow; w != nil {
			// Texts any producer writes, cut as the key is: one message's
			// 17 KiB id would make its batch of spans larger than a
			// collector takes, and cost every span in it.
			if w.ID != "" {
				attrs = append(attrs, semconv.MessagingMessageID(truncate(w.ID, maxKeyText)))
			}
			if id, ok := w.HeaderValue("trace_id"); ok && id != "" {
				attrs = append(attrs, AttrWowTraceID.String(truncate(id, maxKeyText)))
			}
		}
		if failed {
			attrs = append(attrs, semconv.ErrorTypeKey.String(class))
			span.SetStatus(codes.Error, truncate(reason, maxErrorText))
		}
		span.SetAttributes(attrs...)
	}
	span.End()
}

// truncate makes a text fit a span: valid UTF-8 (an exporter refuses to
// encode anything else, and drops the whole batch with it; a sink's error
// may quote any bytes it answered) and at most max bytes, cut between two
// characters.
func truncate(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
