// Package tracing carries W3C trace context (https://www.w3.org/TR/trace-context/)
// through wowd and, when wow.tracing is enabled, records one OpenTelemetry
// span per message.
//
// Propagation is always on and needs no SDK: a record's traceparent and
// tracestate headers, when valid, become the remote span context of the
// context.Context its handler gets (trace.SpanContextFromContext reads it,
// and so does OpenTelemetry instrumentation inside a plugin), and the HTTP
// sink sends the span context it finds there as traceparent and tracestate
// request headers. A traceparent that is not valid is not forwarded, and
// its tracestate is ignored with it.
//
// Wow itself sets no Kafka headers: its messages carry a trace_id entry in
// their JSON header map, a Wow message id (a CosId string, the id of the
// command that started the chain), not a W3C trace id. Nothing is derived
// from it: it cannot be turned into a 128-bit trace id that the producer's
// own spans would share, and a made-up one would join unrelated work. It
// reaches the HTTP sink as the Wow-Header-Trace_id header, as every Wow
// header entry does, and spans carry it as the attribute wow.trace_id.
package tracing

import (
	"context"
	"encoding/hex"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/wowd/wowd/handler"
)

// The W3C header names: lower case on Kafka records (the names are
// compared without regard to case) and canonical in an http.Header.
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"

	httpTraceparent = "Traceparent"
	httpTracestate  = "Tracestate"
)

// FromHeaders returns the span context of a record's traceparent and
// tracestate headers, marked remote, and whether there is a valid one. A
// record with more than one traceparent has none (the W3C rule for HTTP);
// several tracestate headers are joined as HTTP joins repeated fields, and
// their empty and blank list members, which the recommendation allows, are
// passed over. A tracestate that does not parse is dropped and the
// traceparent kept.
func FromHeaders(hs []handler.Header) (trace.SpanContext, bool) {
	var parent []byte
	n, states := 0, 0
	for i := range hs {
		switch {
		case strings.EqualFold(hs[i].Key, HeaderTraceparent):
			parent = hs[i].Value
			n++
		case strings.EqualFold(hs[i].Key, HeaderTracestate):
			states++
		}
	}
	if n != 1 {
		return trace.SpanContext{}, false
	}
	tid, sid, flags, ok := ParseTraceparent(parent)
	if !ok {
		return trace.SpanContext{}, false
	}
	cfg := trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags), Remote: true}
	if states > 0 {
		var b strings.Builder
		for i := range hs {
			if !strings.EqualFold(hs[i].Key, HeaderTracestate) {
				continue
			}
			for m := range strings.SplitSeq(string(hs[i].Value), ",") {
				if m = strings.Trim(m, " \t"); m == "" {
					continue
				}
				if b.Len() > 0 {
					b.WriteByte(',')
				}
				b.WriteString(m)
			}
		}
		if ts, err := trace.ParseTraceState(b.String()); err == nil {
			cfg.TraceState = ts
		}
	}
	return trace.NewSpanContext(cfg), true
}

// ParseTraceparent parses a traceparent header value as the W3C Trace
// Context recommendation reads it: version, trace id, parent (span) id and
// flags, in lower-case hex separated by hyphens. Version ff is invalid;
// version 00 is exactly 55 characters; a later version may carry more
// fields after a hyphen, which are ignored (the value is read as version
// 00). An all-zero trace id or span id is invalid. The flags returned are
// the ones defined (sampled, 0x01, and random, 0x02): the others are set
// to zero, as a version 00 value sent on must have them, so a sink's
// OpenTelemetry propagator, which refuses a version 00 value with unknown
// flags, takes the context wowd hands on.
func ParseTraceparent(v []byte) (tid trace.TraceID, sid trace.SpanID, flags byte, ok bool) {
	const n00 = 55 // 2 + 1 + 32 + 1 + 16 + 1 + 2
	if len(v) < n00 || v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return tid, sid, 0, false
	}
	var ver [1]byte
	if !lowerHex(ver[:], v[0:2]) || ver[0] == 0xff {
		return tid, sid, 0, false
	}
	if len(v) > n00 && (ver[0] == 0 || v[n00] != '-') {
		return tid, sid, 0, false
	}
	var fl [1]byte
	if !lowerHex(tid[:], v[3:35]) || !lowerHex(sid[:], v[36:52]) || !lowerHex(fl[:], v[53:55]) {
		return tid, sid, 0, false
	}
	if !tid.IsValid() || !sid.IsValid() {
		return tid, sid, 0, false
	}
	return tid, sid, fl[0] & knownFlags, true
}

// knownFlags are the trace flags the recommendation defines: sampled and
// random.
const knownFlags = 0x03

// lowerHex decodes src, lower-case hex only, into dst.
func lowerHex(dst, src []byte) bool {
	for _, c := range src {
		if ('A' <= c && c <= 'F') || (c >= 'g' && c <= 'z') {
			return false
		}
	}
	n, err := hex.Decode(dst, src)
	return err == nil && n == len(dst)
}

// Inject sets the traceparent and tracestate of ctx's span context, if it
// has a valid one, on h (always as version 00). It costs nothing without
// one.
func Inject(ctx context.Context, h http.Header) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return
	}
	h[httpTraceparent] = []string{Traceparent(sc)}
	if ts := sc.TraceState(); ts.Len() > 0 {
		h[httpTracestate] = []string{ts.String()}
	} else {
		delete(h, httpTracestate)
	}
}

// Traceparent formats sc as a version 00 traceparent value.
func Traceparent(sc trace.SpanContext) string {
	var b [55]byte
	b[0], b[1], b[2] = '0', '0', '-'
	tid, sid := sc.TraceID(), sc.SpanID()
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(sc.TraceFlags())})
	return string(b[:])
}

// Context returns parent with sc as its remote span context.
func Context(parent context.Context, sc trace.SpanContext) context.Context {
	return trace.ContextWithRemoteSpanContext(parent, sc)
}
