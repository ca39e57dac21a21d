package receiver

import (
	"bytes"
	"slices"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/metrics"
	"go.uber.org/zap"
)

// The screening of a record before its handler: the local-first copy, the
// Wow checks and the dispatcher's filters.

// screen decides whether the record goes to the handler: a record this
// service already handled locally first, one no filter wants, or one that is
// not a valid Wow message of its topic is finished here instead.
func (j *job) screen() bool {
	r := j.r
	if (j.local == nil || j.redriven) && r.handledLocally(j.rec.Headers) {
		j.copyVersion()
		j.finish(metrics.Local) // handled when it was ingested; this is its copy coming back
		return false
	}
	if !r.o.Wow {
		return true
	}
	if j.ws == nil {
		j.ws = new(wowState)
	}
	if r.o.WowRoutingOnly {
		return j.screenRoute()
	}
	m := &j.ws.m
	if err := m.Decode(j.kind, j.rec.Value); err != nil {
		j.reject("undecodable", err)
		return false
	}
	if err := m.Check(j.rec.Key, j.route.Context, j.route.Aggregate); err != nil {
		j.reject("mismatch", err)
		return false
	}
	c, compensation := m.Compensation()
	// The version check comes before the filters: the aggregate's stream
	// goes through an event this dispatcher does not want too, and without
	// its version the next one it wants would be a false gap. A
	// compensation is a resend of an earlier version on purpose, not part
	// of the stream: it is not checked, and teaches the table nothing.
	if r.versions != nil && j.kind == handler.KindEvent && m.HasVersion && !compensation && !j.checkVersion(m.Version) {
		return false
	}
	if !j.wanted(m.Name, m.Events, c.Context, c.Processor, compensation) {
		j.versionHandled()
		j.finish(metrics.Skipped)
		return false
	}
	j.fillWow()
	j.msg.Wow = &j.ws.pub
	return true
}

// copyVersion records, under the version check, the version of an event
// stream whose copy is skipped because an instance of the dispatcher
// handled it when it was ingested: that instance may be another one, and
// only its own table learnt the version. Without it here, the aggregate's
// next message this receiver checks would be a false gap (and, with
// on-gap park, park the aggregate when nothing is missing). The copy is
// decoded as the check decodes every other record; one that does not
// decode, or is not a message of its aggregate, tells nothing. A copy past
// the last version is recorded too: the versions between may have been
// handled where they were ingested and never published (a publish that
// failed after the local handling), and an aggregate's messages come in
// version order (one writer per aggregate), so a lower version after it
// is a duplicate as anywhere else.
func (j *job) copyVersion() {
	r := j.r
	if r.versions == nil || j.kind != handler.KindEvent {
		return
	}
	if j.ws == nil {
		j.ws = new(wowState)
	}
	m := &j.ws.m
	if m.Decode(j.kind, j.rec.Value) != nil || !m.HasVersion ||
		m.Check(j.rec.Key, j.route.Context, j.route.Aggregate) != nil {
		return
	}
	if _, compensation := m.Compensation(); compensation {
		return // a resend of an earlier version on purpose: teaches nothing, as in screen
	}
	r.versions.handled(parkKey{j.rec.Topic, j.msg.AggregateID}, m.Version, j.p, true)
}

// screenRoute is screen's Wow part for a handler that reads only the
// routing fields: the value is scanned, not decoded, and the handler gets
// the routing fields as views of the record's value.
func (j *job) screenRoute() bool {
	ws := j.ws
	rt := &ws.route
	if err := rt.Scan(j.kind, j.rec.Value, true); err != nil {
		j.reject("undecodable", err)
		return false
	}
	if err := rt.Check(j.rec.Key, j.route.Context, j.route.Aggregate); err != nil {
		j.reject("mismatch", err)
		return false
	}
	ws.events = ws.events[:0]
	for i := range rt.Events() {
		ws.events = append(ws.events, rt.Event(i))
	}
	context, processor, compensation := rt.Compensation()
	if !j.wanted(rt.Name(), ws.events, context, processor, compensation) {
		j.finish(metrics.Skipped)
		return false
	}
	ws.pub = handler.Wow{
		Name: rt.Name(), ContextName: rt.ContextName(), AggregateName: rt.AggregateName(),
		AggregateID: rt.AggregateID(),
	}
	if len(ws.events) > 0 {
		ws.pub.Events = ws.events
	}
	j.msg.Wow = &ws.pub
	return true
}

// handledLocally reports whether a record's headers say this receiver
// handled it already, through the ingest endpoint of an instance of its
// service.
func (r *Receiver) handledLocally(hs []kgo.RecordHeader) bool {
	by, listed := false, false
	var list []byte
	for _, h := range hs {
		switch h.Key {
		case HeaderHandledBy:
			by = by || string(h.Value) == r.o.Service
		case HeaderHandledDispatchers:
			listed, list = true, h.Value
		}
	}
	if !by {
		return false
	}
	if !listed {
		return true // marked before the list existed: every receiver of the service handled it
	}
	for name := range bytes.SplitSeq(list, []byte(",")) {
		if string(name) == r.o.Dispatcher {
			return true
		}
	}
	return false
}

// wanted applies the dispatcher's filters and the compensation rule to a
// message's command name or event names, and its compensation target
// (compensation: an event stream or a state event resent as a
// compensation, for processor in context).
func (j *job) wanted(name string, events []string, context, processor string, compensation bool) bool {
	r := j.r
	switch j.kind {
	case handler.KindCommand:
		if len(r.o.Commands) > 0 && !r.o.Commands[name] {
			return false
		}
	case handler.KindEvent, handler.KindState:
		if len(r.o.Events) > 0 && !slices.ContainsFunc(events, func(e string) bool { return r.o.Events[e] }) {
			return false
		}
	}
	// An event stream or a state event resent as a compensation goes only
	// to the function it names, as Wow's CompensationMatcher decides: here,
	// the dispatcher whose name is its processor, in the context it names:
	// the message's own bounded context (a projector of the service whose
	// aggregate it is, as Wow names one) or wowd's service (wow.service).
	// Every other dispatcher skips it, as Wow's other processors do.
	if compensation && j.kind != handler.KindCommand &&
		(processor != r.o.Dispatcher || context != r.o.Service && context != j.route.Context) {
		return false
	}
	return true
}

func (j *job) fillWow() {
	m := &j.ws.m
	j.ws.pub = handler.Wow{
		ID: m.ID, Name: m.Name, ContextName: m.ContextName, AggregateName: m.AggregateName,
		AggregateID: m.AggregateID, TenantID: m.TenantID, RequestID: m.RequestID, CommandID: m.CommandID,
		Version: m.Version, HasVersion: m.HasVersion, Events: m.Events,
		// Same fields: view the decoded header as the public type.
		Header: unsafe.Slice((*handler.WowHeader)(unsafe.Pointer(unsafe.SliceData(m.Header))), len(m.Header)),
	}
	if m.CreateTime != 0 {
		j.ws.pub.CreateTime = time.UnixMilli(m.CreateTime)
	}
}

// reject handles a record that is not a valid Wow message of its topic:
// dead-lettered with the reason, or, with dead letters disabled, logged,
// counted and skipped (retrying cannot fix it, and it must not stall the
// partition).
func (j *job) reject(class string, err error) {
	r := j.r
	if !r.o.DeadLetter.Enabled {
		r.log.Warn("record is not a valid Wow message of its topic; skipped (dead letters are disabled)",
			zap.String("topic", j.rec.Topic), zap.Int32("partition", j.rec.Partition), zap.Int64("offset", j.rec.Offset),
			zap.String("class", class), zap.Error(err))
		j.finish(metrics.Unroutable)
		return
	}
	j.failure = failure{class: class, reason: err.Error(), attempts: 0, screened: true}
	r.deadLetter(j)
}
