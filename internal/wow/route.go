package wow

import (
	"bytes"
	"fmt"
	"unicode/utf8"
	"unsafe"
)

// Route is what wowd reads of a Wow message to check and route it: the
// names that place it (contextName, aggregateName, aggregateId), a
// command's name, the event names of a stream when asked for, and a state
// event's compensation target. [Route.Scan] finds them in one pass without
// copying: the strings a Route returns are views of the value, valid while
// the value is and as long as it is not modified.
//
// Scan checks the structure of the value (one object whose strings,
// objects and arrays are closed) and the fields it reads, as
// [Message.Decode] does; it does not validate the values it skips (their
// numbers, literals, escapes and UTF-8), so it accepts some values that
// Decode rejects, never the other way round. When Decode accepts a value,
// Scan accepts it too and reads the same names: the fuzz test holds it to
// that. Routing strings written with escapes (never by Wow's Jackson for
// these names) are read through Decode.
//
// A Route is reused from one message to the next; it allocates nothing in
// the steady state.
type Route struct {
	kind   Kind
	data   []byte
	fields [nRouteFields]rspan
	events []rspan
	// compensation: the header's compensate.id was present (event streams
	// and state events), with compensate.context's and
	// compensate.processor's values.
	compensated bool
	compContext rspan
	processor   rspan
	full        *Message // the decoded message when a routing string had escapes
	useFull     bool
	// indexed: the 64-byte blocks the last Scan indexed, each block of the
	// value about once (a test holds it to that: a scan that indexed the
	// value again per member would be quadratic).
	indexed int
}

// routeScan is one Scan: the Route it fills and how to read the value. It
// lives on the scanning goroutine's stack, in that core's cache, rather
// than with the Route, which a pooled job carries from core to core.
type routeScan struct {
	*Route
	// ix, the value's structural index, finds the ends of strings and
	// containers. With no backslash in the value (the index tells for a
	// value of one window, one vectorized search otherwise), no string has
	// escapes.
	ix        index
	backslash bool
}

// rspan is a value Route read: its type (see typeOf; 0 when absent) and,
// for a string, its contents' bounds in the value.
type rspan struct {
	typ        byte
	start, end int32
	esc        bool
}

// notObject is the type of an event that is not an object; its start holds
// the element's type.
const notObject = 1

// The fields of Route.fields.
const (
	rContextName = iota
	rAggregateName
	rAggregateID
	rName
	nRouteFields
)

var routeFieldNames = [nRouteFields]string{"contextName", "aggregateName", "aggregateId", "name"}

// Scan reads value, a record value of kind, into r. With events, the event
// names of an event stream or state event are read too (for the
// dispatcher's event filter); without, the body is only required to be
// there and skipped. Errors are [*DecodeError]s.
func (r *Route) Scan(kind Kind, value []byte, events bool) error {
	*r = Route{kind: kind, data: value, events: r.events[:0], full: r.full}
	if kind != KindCommand && kind != KindEvent && kind != KindState {
		return &DecodeError{Kind: kind, Reason: "unknown message kind"}
	}
	if len(value) > 1<<31-1 {
		return r.decodeFull(value) // spans are 32-bit; Decode reads any size
	}
	s := routeScan{Route: r}
	s.ix.reset(value)
	if len(value) <= indexWindow*64 {
		s.backslash = s.ix.backslashes // the first window is the whole value
	} else {
		s.backslash = bytes.IndexByte(value, '\\') >= 0
	}
	esc, err := s.scan(events)
	r.indexed = s.ix.indexed
	if err != nil {
		return err
	}
	if esc {
		return r.decodeFull(value)
	}
	return r.check()
}

// skipString finds the closing quote of the string whose contents start at
// i: its position, whether the string has escapes, and false when it does
// not end.
func (r *routeScan) skipString(i int) (end int, esc bool, ok bool) {
	end, near := r.ix.nearQuote(i)
	if !near {
		if end = r.ix.stringEndFar(i); end >= len(r.data) {
			return end, false, false
		}
	}
	return end, r.backslash && bytes.IndexByte(r.data[i:end], '\\') >= 0, true
}

// strFar reads the string whose opening quote is at p where the quote
// iterator cannot (index.stringAt): the position of its closing quote, the
// iterator after it, and false when it does not end.
func (r *routeScan) strFar(p int) (int, quoteIter, bool) {
	end, q := r.ix.stringAtFar(p)
	return end, q, end < len(r.data)
}

// escapes reports whether d[i:j] has a backslash; the scan asks only when
// the value has one.
func (r *routeScan) escapes(i, j int) bool {
	return bytes.IndexByte(r.data[i:j], '\\') >= 0
}

// validUTF8 reports whether d[i:j] is valid UTF-8, without looking at it
// when the index knows it is ASCII.
func (r *routeScan) validUTF8(i, j int) bool {
	return r.ix.ascii(i, j) || utf8.Valid(r.data[i:j])
}

// skipValue returns the position after the value at i, following only its
// structure (strings, and the nesting of objects and arrays), and false
// when it does not end.
func (r *routeScan) skipValue(i int) (int, bool) {
	if i < len(r.data) {
		switch r.data[i] {
		case '{', '[':
			return r.ix.skipContainer(i)
		case '"':
			end := r.ix.stringEnd(i + 1)
			return end + 1, end < len(r.data)
		}
	}
	return skipScalar(r.data, i)
}

// Reset drops the Route's reference to the last value scanned, keeping its
// buffers: a pooled Route then holds no record's memory.
func (r *Route) Reset() {
	*r = Route{events: r.events[:0], full: r.full}
}

// decodeFull reads the routing fields through Message.Decode.
func (r *Route) decodeFull(value []byte) error {
	if r.full == nil {
		r.full = new(Message)
	}
	if err := r.full.Decode(r.kind, value); err != nil {
		return err
	}
	r.useFull = true
	return nil
}

// routeSyntax is the error of a value whose structure Scan cannot follow.
func (r *Route) routeSyntax(pos int, what string) error {
	return &DecodeError{Kind: r.kind, Syntax: true, Offset: pos, Reason: what}
}

// scan reads the top-level object. It reports whether a routing string (or
// a key) has escapes, in which case the caller decodes the value fully.
func (r *routeScan) scan(events bool) (esc bool, err error) {
	d := r.data
	i := skipWS(d, 0)
	if i >= len(d) {
		return false, r.routeSyntax(i, "empty value")
	}
	if d[i] != '{' {
		end, ok := r.skipValue(i)
		if !ok {
			return false, r.routeSyntax(i, "unterminated value")
		}
		if j := skipWS(d, end); j != len(d) {
			return false, r.routeSyntax(j, "invalid character after top-level value")
		}
		return false, &DecodeError{Kind: r.kind, Reason: "the value is " + typeName(typeOf(d[i])) + ", want an object"}
	}
	i = skipWS(d, i+1)
	q := r.ix.quotesFrom(i) // the scan's quote iterator
	var bodyType, stateType byte
	var deleted bool
	headers := 0 // header members read so far
	if i < len(d) && d[i] == '}' {
		i++
	} else {
		for {
			if i >= len(d) || d[i] != '"' {
				return false, r.routeSyntax(i, "looking for the beginning of an object key")
			}
			ks := i + 1
			ke, nq, ok := r.ix.stringAt(q, i)
			if !ok {
				if ke, nq, ok = r.strFar(i); !ok {
					return false, r.routeSyntax(i, "unterminated string")
				}
			}
			q = nq
			if r.backslash && r.escapes(ks, ke) {
				esc = true
			}
			i = skipWS(d, ke+1)
			if i >= len(d) || d[i] != ':' {
				return false, r.routeSyntax(i, "after an object key")
			}
			i = skipWS(d, i+1)
			if i >= len(d) {
				return false, r.routeSyntax(i, "looking for the beginning of a value")
			}
			f := -1
			switch string(d[ks:ke]) {
			case "contextName":
				f = rContextName
			case "aggregateName":
				f = rAggregateName
			case "aggregateId":
				f = rAggregateID
			case "name":
				if r.kind == KindCommand {
					f = rName
				}
			case "header":
				if r.kind == KindCommand {
					break
				}
				f = -2
				if headers++; headers > 1 {
					// A repeated header is read key by key at once:
					// skipping it first and reading it again would index
					// the value again from its start, once per header.
					if i, ok = r.scanHeader(i); !ok {
						return false, r.routeSyntax(i, "unterminated header")
					}
					break
				}
				// Read key by key only where a compensation may be: most
				// headers are skipped whole, as fast as any value.
				end, ok := r.skipValue(i)
				if !ok {
					return false, r.routeSyntax(i, "unterminated header")
				}
				if h := d[i:end]; bytes.Contains(h, compensationKey) || r.backslash && bytes.IndexByte(h, '\\') >= 0 {
					if i, ok = r.scanHeader(i); !ok {
						return false, r.routeSyntax(i, "unterminated header")
					}
				} else {
					r.compensated, r.compContext, r.processor = false, rspan{}, rspan{} // a later header replaces an earlier one
					i = end
				}
			case "state":
				if r.kind == KindState {
					stateType = typeOf(d[i]) // skipped below
				}
			case "deleted":
				deleted = deleted || r.kind == KindState
			case "body":
				if r.kind != KindCommand {
					bodyType = typeOf(d[i])
					if events {
						var besc bool
						i, q, besc, ok = r.scanBody(i, q)
						if !ok {
							return false, r.routeSyntax(i, "unterminated body")
						}
						esc = esc || besc
						f = -2
					}
				}
			}
			switch {
			case f >= 0:
				v := rspan{typ: typeOf(d[i])}
				if v.typ == '"' {
					end, nq, ok := r.ix.stringAt(q, i)
					if !ok {
						if end, nq, ok = r.strFar(i); !ok {
							return false, r.routeSyntax(i, "unterminated string")
						}
					}
					q = nq
					sesc := r.backslash && r.escapes(i+1, end)
					v.start, v.end, v.esc = int32(i+1), int32(end), sesc || !r.validUTF8(i+1, end)
					esc = esc || v.esc
					i = end + 1
				} else {
					end, ok := r.skipValue(i)
					if !ok {
						return false, r.routeSyntax(i, "unterminated value")
					}
					i = end
				}
				r.fields[f] = v
			case f == -1:
				if d[i] == '"' { // skipValue's common case, inlined
					end, nq, ok := r.ix.stringAt(q, i)
					if !ok {
						if end, nq, ok = r.strFar(i); !ok {
							return false, r.routeSyntax(i, "unterminated value")
						}
					}
					q, i = nq, end+1
					break
				}
				end, ok := r.skipValue(i)
				if !ok {
					return false, r.routeSyntax(i, "unterminated value")
				}
				i = end
			}
			i = skipWS(d, i)
			if i < len(d) && d[i] == ',' {
				i = skipWS(d, i+1)
				continue
			}
			if i < len(d) && d[i] == '}' {
				i++
				break
			}
			return false, r.routeSyntax(i, "after an object key:value pair")
		}
	}
	if j := skipWS(d, i); j != len(d) {
		return false, r.routeSyntax(j, "invalid character after top-level value")
	}
	if r.kind != KindCommand {
		switch bodyType {
		case 0:
			if !esc {
				return false, &DecodeError{Kind: r.kind, Reason: "missing body"}
			}
		case '[':
		default:
			if !esc {
				return false, &DecodeError{Kind: r.kind, Reason: "body is " + typeName(bodyType) + ", want an array of events"}
			}
		}
	}
	if r.kind == KindState && !esc {
		if reason := stateReason(stateType, deleted); reason != "" {
			return false, &DecodeError{Kind: r.kind, Reason: reason}
		}
	}
	return esc, nil
}

// compensationKey is how compensate.id is written as a header key.
var compensationKey = []byte(`"` + HeaderCompensationID + `"`)

// scanHeader reads the header of an event stream or a state event (i is at
// its value), noting the compensation target; it returns the position
// after the value.
func (r *routeScan) scanHeader(i int) (int, bool) {
	d := r.data
	r.compensated, r.compContext, r.processor = false, rspan{}, rspan{} // a later header replaces an earlier one
	if d[i] != '{' {
		return r.skipValue(i)
	}
	i = skipWS(d, i+1)
	if i < len(d) && d[i] == '}' {
		return i + 1, true
	}
	for {
		if i >= len(d) || d[i] != '"' {
			return i, false
		}
		ks := i + 1
		ke, kesc, ok := r.skipString(ks)
		if !ok {
			return i, false
		}
		i = skipWS(d, ke+1)
		if i >= len(d) || d[i] != ':' {
			return i, false
		}
		i = skipWS(d, i+1)
		if i >= len(d) {
			return i, false
		}
		key := d[ks:ke]
		switch {
		case kesc:
			// An escaped header key: which key it is needs decoding.
			r.useFull = true
			end, ok := r.skipValue(i)
			if !ok {
				return end, false
			}
			i = end
		case string(key) == HeaderCompensationID:
			r.compensated = true
			end, ok := r.skipValue(i)
			if !ok {
				return end, false
			}
			i = end
		case string(key) == HeaderCompensationProcessor:
			if r.processor, i, ok = r.headerValue(i); !ok {
				return i, false
			}
		case string(key) == HeaderCompensationContext:
			if r.compContext, i, ok = r.headerValue(i); !ok {
				return i, false
			}
		default:
			end, ok := r.skipValue(i)
			if !ok {
				return end, false
			}
			i = end
		}
		i = skipWS(d, i)
		if i < len(d) && d[i] == ',' {
			i = skipWS(d, i+1)
			continue
		}
		if i < len(d) && d[i] == '}' {
			return i + 1, true
		}
		return i, false
	}
}

// scanBody reads the body of an event stream or state event (i is at its
// value, q the scan's quote iterator), keeping each event's name; it
// returns the position after the value, the iterator, and whether a name
// had escapes.
func (r *routeScan) scanBody(i int, q quoteIter) (int, quoteIter, bool, bool) {
	d := r.data
	r.events = r.events[:0] // a later body replaces an earlier one
	if d[i] != '[' {
		end, ok := r.skipValue(i)
		return end, q, false, ok
	}
	esc := false
	i = skipWS(d, i+1)
	if i < len(d) && d[i] == ']' {
		return i + 1, q, false, true
	}
	for {
		if i >= len(d) {
			return i, q, false, false
		}
		if d[i] != '{' {
			r.events = append(r.events, rspan{typ: notObject, start: int32(typeOf(d[i]))}) // Decode rejects it
			end, ok := r.skipValue(i)
			if !ok {
				return end, q, false, false
			}
			i = end
		} else {
			var name rspan
			i = skipWS(d, i+1)
			if i < len(d) && d[i] == '}' {
				i++
			} else {
				for {
					if i >= len(d) || d[i] != '"' {
						return i, q, false, false
					}
					ks := i + 1
					ke, nq, ok := r.ix.stringAt(q, i)
					if !ok {
						if ke, nq, ok = r.strFar(i); !ok {
							return i, q, false, false
						}
					}
					q = nq
					esc = esc || r.backslash && r.escapes(ks, ke)
					i = skipWS(d, ke+1)
					if i >= len(d) || d[i] != ':' {
						return i, q, false, false
					}
					i = skipWS(d, i+1)
					if i >= len(d) {
						return i, q, false, false
					}
					if string(d[ks:ke]) == "name" {
						name = rspan{typ: typeOf(d[i])}
						if name.typ == '"' {
							end, nq, ok := r.ix.stringAt(q, i)
							if !ok {
								if end, nq, ok = r.strFar(i); !ok {
									return i, q, false, false
								}
							}
							q = nq
							sesc := r.backslash && r.escapes(i+1, end)
							name.start, name.end, name.esc = int32(i+1), int32(end), sesc || !r.validUTF8(i+1, end)
							esc = esc || name.esc
							i = end + 1
						} else {
							end, ok := r.skipValue(i)
							if !ok {
								return end, q, false, false
							}
							i = end
						}
					} else if d[i] == '"' { // skipValue's common case, inlined
						end, nq, ok := r.ix.stringAt(q, i)
						if !ok {
							if end, nq, ok = r.strFar(i); !ok {
								return end + 1, q, false, false // as skipValue
							}
						}
						q, i = nq, end+1
					} else {
						end, ok := r.skipValue(i)
						if !ok {
							return end, q, false, false
						}
						i = end
					}
					i = skipWS(d, i)
					if i < len(d) && d[i] == ',' {
						i = skipWS(d, i+1)
						continue
					}
					if i < len(d) && d[i] == '}' {
						i++
						break
					}
					return i, q, false, false
				}
			}
			r.events = append(r.events, name)
		}
		i = skipWS(d, i)
		if i < len(d) && d[i] == ',' {
			i = skipWS(d, i+1)
			continue
		}
		if i < len(d) && d[i] == ']' {
			return i + 1, q, esc, true
		}
		return i, q, false, false
	}
}

// check applies Decode's requirements to the fields read.
func (r *Route) check() error {
	required := r.fields[:]
	if r.kind != KindCommand {
		required = required[:rName]
	}
	for f, v := range required {
		switch v.typ {
		case 0:
			return &DecodeError{Kind: r.kind, Reason: "missing " + routeFieldNames[f]}
		case '"':
		default:
			return &DecodeError{Kind: r.kind, Reason: routeFieldNames[f] + " is " + typeName(v.typ) + ", want a string"}
		}
	}
	if v := r.fields[rAggregateID]; v.start == v.end {
		return &DecodeError{Kind: r.kind, Reason: "aggregateId is empty"}
	}
	for i, e := range r.events {
		switch e.typ {
		case '"':
		case notObject:
			return &DecodeError{Kind: r.kind, Reason: fmt.Sprintf("body[%d] is %s, want an event object", i, typeName(byte(e.start)))}
		case 0:
			return &DecodeError{Kind: r.kind, Reason: fmt.Sprintf("body[%d] has no name", i)}
		default:
			return &DecodeError{Kind: r.kind, Reason: fmt.Sprintf("body[%d].name is %s, want a string", i, typeName(e.typ))}
		}
	}
	if r.useFull {
		return r.decodeFull(r.data) // an escaped header key: which one it is needs decoding
	}
	return nil
}

// str returns the text of a string read, as a view of the value.
func (r *Route) str(v rspan) string {
	if v.end <= v.start {
		return ""
	}
	return unsafe.String(&r.data[v.start], int(v.end-v.start))
}

// ContextName returns the message's contextName.
func (r *Route) ContextName() string {
	if r.useFull {
		return r.full.ContextName
	}
	return r.str(r.fields[rContextName])
}

// AggregateName returns the message's aggregateName.
func (r *Route) AggregateName() string {
	if r.useFull {
		return r.full.AggregateName
	}
	return r.str(r.fields[rAggregateName])
}

// AggregateID returns the message's aggregateId.
func (r *Route) AggregateID() string {
	if r.useFull {
		return r.full.AggregateID
	}
	return r.str(r.fields[rAggregateID])
}

// Name returns a command's name ("" for other kinds).
func (r *Route) Name() string {
	if r.useFull {
		return r.full.Name
	}
	return r.str(r.fields[rName])
}

// Events returns the number of events read (Scan with events).
func (r *Route) Events() int {
	if r.useFull {
		return len(r.full.Events)
	}
	return len(r.events)
}

// Event returns the name of event i.
func (r *Route) Event(i int) string {
	if r.useFull {
		return r.full.Events[i]
	}
	return r.str(r.events[i])
}

// headerValue reads the header value at i: a string's span (one with
// escapes or bytes that are not UTF-8 is read through Decode), or any
// other value's type; it returns the position after it.
func (r *routeScan) headerValue(i int) (rspan, int, bool) {
	d := r.data
	v := rspan{typ: typeOf(d[i])}
	if v.typ != '"' {
		end, ok := r.skipValue(i)
		return v, end, ok
	}
	end, sesc, ok := r.skipString(i + 1)
	if !ok {
		return v, i, false
	}
	v.start, v.end, v.esc = int32(i+1), int32(end), sesc || !r.validUTF8(i+1, end)
	if v.esc {
		r.useFull = true
	}
	return v, end + 1, true
}

// Compensation reports whether an event stream or a state event is a
// compensation (its header has compensate.id), and the context and
// processor it targets.
func (r *Route) Compensation() (context, processor string, ok bool) {
	if r.kind == KindCommand {
		return "", "", false
	}
	if r.useFull {
		c, ok := r.full.Compensation()
		return c.Context, c.Processor, ok
	}
	if !r.compensated {
		return "", "", false
	}
	if r.compContext.typ == '"' {
		context = r.str(r.compContext)
	}
	if r.processor.typ == '"' {
		processor = r.str(r.processor)
	}
	return context, processor, true
}

// Check is [Message.Check] for the names read.
func (r *Route) Check(recordKey []byte, contextName, aggregateName string) error {
	if id := r.AggregateID(); string(recordKey) != id {
		return fmt.Errorf("%w: key %q, aggregateId %q", ErrKeyMismatch, recordKey, id)
	}
	if cn, an := r.ContextName(), r.AggregateName(); cn != contextName || an != aggregateName {
		return fmt.Errorf("%w: the topic is for %s.%s, the message for %s.%s",
			ErrTopicMismatch, contextName, aggregateName, cn, an)
	}
	return nil
}

// skipWS returns the position of the first byte at or after i that is not
// JSON whitespace.
func skipWS(d []byte, i int) int {
	for i < len(d) && d[i] <= ' ' { // compact JSON has none: one test
		switch d[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipScalar returns the position after the number or literal at i (up
// to the next delimiter), and false when it is empty.
func skipScalar(d []byte, i int) (int, bool) {
	start := i
	for i < len(d) {
		switch d[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r', ':', '"', '{', '[':
			return i, i > start
		}
		i++
	}
	return i, i > start
}
