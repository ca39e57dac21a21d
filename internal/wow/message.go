package wow

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/wowd/wowd/handler"
)

// Kind is the kind of message a topic carries, named by the topic's suffix.
type Kind = handler.Kind

// The message kinds.
const (
	KindCommand = handler.KindCommand // .command: a command
	KindEvent   = handler.KindEvent   // .event: a domain event stream
	KindState   = handler.KindState   // .state: a state event
)

// Header keys that Wow writes and wowd reads.
const (
	HeaderLocalFirst            = "local_first"
	HeaderCompensationID        = "compensate.id"
	HeaderCompensationContext   = "compensate.context"
	HeaderCompensationProcessor = "compensate.processor"
	HeaderCompensationFunction  = "compensate.function"
)

// Message is what wowd reads of a Wow message: the fields that route it and
// that handlers are given. Fields a kind does not have are empty.
type Message struct {
	Kind          Kind
	ID            string // the message id
	Name          string // the command name (commands only)
	ContextName   string // the bounded context's name (not its alias)
	AggregateName string
	AggregateID   string
	TenantID      string
	RequestID     string
	CommandID     string // the command that produced the events (event streams, state events)
	// Version is the aggregate version: version for event streams and state
	// events; for commands, the expected aggregateVersion. HasVersion says
	// whether the message carries one (commands usually do not).
	Version    int64
	HasVersion bool
	CreateTime int64 // epoch milliseconds, 0 when absent
	// Header holds the message header in the order written; a key written
	// twice appears once, with its last value, in its first place.
	Header []HeaderField
	// Events holds the names of the events of a stream (body[].name), in
	// order (event streams and state events).
	Events []string

	scratch scratch
}

// HeaderField is one entry of a message header.
type HeaderField struct {
	Key, Value string
}

// scratch holds what scan notes for fill, and the memory Decode reuses
// from one message to the next.
type scratch struct {
	top        byte // the type of the top-level value (see typeOf)
	vals       [nScalars]rawValue
	headerType byte // the type of the header value, 0 when absent
	header     []headerEntry
	bodyType   byte // the type of the body value, 0 when absent
	stateType  byte // a state event's state: the type of its value, 0 when absent
	deleted    bool // a state event's deleted is present
	bodyErr    string
	events     []span
	kinds      []uint64
	ends       []int
	index      map[string]int
}

type headerEntry struct {
	key, val span
	typ      byte // the value's type
}

// The scalar fields read, by index into scratch.vals: strings, then numbers.
const (
	fID = iota
	fName
	fContextName
	fAggregateName
	fAggregateID
	fTenantID
	fRequestID
	fCommandID
	nStrings
)

const (
	fVersion = nStrings + iota
	fCreateTime
	nScalars
)

// What field returns for keys that are not scalar fields.
const (
	fNone = -1 - iota // skipped
	fHeader
	fBody
	fState   // a state event's state
	fDeleted // a state event's deleted
)

var fieldNames = [nScalars]string{"id", "name", "contextName", "aggregateName", "aggregateId",
	"tenantId", "requestId", "commandId", "version", "createTime"}

// field returns the field that key names in a message of kind.
func field(kind Kind, key []byte) int {
	switch string(key) {
	case "id":
		return fID
	case "contextName":
		return fContextName
	case "aggregateName":
		return fAggregateName
	case "aggregateId":
		return fAggregateID
	case "tenantId":
		return fTenantID
	case "requestId":
		return fRequestID
	case "createTime":
		return fCreateTime
	case "header":
		return fHeader
	}
	if kind == KindCommand {
		switch string(key) {
		case "name":
			return fName
		case "aggregateVersion":
			return fVersion
		}
		return fNone
	}
	switch string(key) {
	case "commandId":
		return fCommandID
	case "version":
		return fVersion
	case "body":
		return fBody
	}
	if kind == KindState {
		switch string(key) {
		case "state":
			return fState
		case "deleted":
			return fDeleted
		}
	}
	return fNone
}

// DecodeError reports a record value that is not a Wow message of the
// expected kind.
type DecodeError struct {
	Kind Kind
	// Syntax is set when the value is not JSON; Offset is then the byte
	// offset in the value where reading stopped.
	Syntax bool
	Offset int
	Reason string
}

// Error describes the problem.
func (e *DecodeError) Error() string {
	if e.Syntax {
		return fmt.Sprintf("wow %s: invalid JSON at byte %d: %s", e.Kind, e.Offset, e.Reason)
	}
	return fmt.Sprintf("wow %s: %s", e.Kind, e.Reason)
}

// Decode decodes value, a record value of kind, into a new Message.
func Decode(kind Kind, value []byte) (*Message, error) {
	m := new(Message)
	if err := m.Decode(kind, value); err != nil {
		return nil, err
	}
	return m, nil
}

// Decode decodes value, a record value of kind, into m, reusing m's slices
// (see the package documentation for what is read and required). On error
// m holds no message. m keeps no reference to value.
func (m *Message) Decode(kind Kind, value []byte) error {
	m.reset(kind)
	if kind != KindCommand && kind != KindEvent && kind != KindState {
		return &DecodeError{Kind: kind, Reason: "unknown message kind"}
	}
	s := scanner{data: value, kinds: m.scratch.kinds}
	serr := m.scan(&s)
	m.scratch.kinds = s.kinds
	if serr != nil {
		m.reset(kind)
		return &DecodeError{Kind: kind, Syntax: true, Offset: serr.offset, Reason: serr.msg}
	}
	if reason := m.fill(value); reason != "" {
		m.reset(kind)
		return &DecodeError{Kind: kind, Reason: reason}
	}
	return nil
}

// reset empties m for a message of kind, keeping the slices' memory.
func (m *Message) reset(kind Kind) {
	sc := m.scratch
	*m = Message{Kind: kind, Header: m.Header[:0], Events: m.Events[:0]}
	m.scratch = scratch{header: sc.header[:0], events: sc.events[:0], kinds: sc.kinds, ends: sc.ends[:0], index: sc.index}
}

// scan reads the whole value, validating it as JSON and noting where the
// fields of interest are. A key written twice counts with its last value.
func (m *Message) scan(s *scanner) *syntaxError {
	s.ws()
	if s.pos == len(s.data) {
		return s.errorf("empty value")
	}
	m.scratch.top = typeOf(s.peek())
	if m.scratch.top != '{' {
		if err := s.skip(); err != nil {
			return err
		}
		return s.end()
	}
	var buf [128]byte
	err := s.object(func(k span) *syntaxError {
		switch f := field(m.Kind, s.keyText(k, &buf)); f {
		case fNone:
			return s.skip()
		case fHeader:
			return m.scanHeader(s)
		case fBody:
			return m.scanBody(s)
		case fState:
			m.scratch.stateType = typeOf(s.peek())
			return s.skip()
		case fDeleted:
			m.scratch.deleted = true
			return s.skip()
		default:
			var err *syntaxError
			m.scratch.vals[f], err = s.scalar()
			return err
		}
	})
	if err != nil {
		return err
	}
	return s.end()
}

// scanHeader reads the header object. Values that are not strings are
// noted; whether they are errors depends on later duplicates.
func (m *Message) scanHeader(s *scanner) *syntaxError {
	sc := &m.scratch
	sc.header = sc.header[:0]
	sc.headerType = typeOf(s.peek())
	if sc.headerType != '{' {
		return s.skip() // an error unless null or replaced by a later header
	}
	return s.object(func(k span) *syntaxError {
		e := headerEntry{key: k, typ: typeOf(s.peek())}
		var err *syntaxError
		if e.typ == '"' {
			e.val, err = s.str()
		} else {
			err = s.skip()
		}
		sc.header = append(sc.header, e)
		return err
	})
}

// scanBody reads the body of an event stream or a state event: an array
// of events, of which it keeps the names.
func (m *Message) scanBody(s *scanner) *syntaxError {
	sc := &m.scratch
	sc.events = sc.events[:0]
	sc.bodyErr = ""
	sc.bodyType = typeOf(s.peek())
	if sc.bodyType != '[' {
		sc.bodyErr = "body is " + typeName(sc.bodyType) + ", want an array of events"
		return s.skip()
	}
	return s.array(func(i int) *syntaxError {
		if c := s.peek(); c != '{' {
			if sc.bodyErr == "" {
				sc.bodyErr = fmt.Sprintf("body[%d] is %s, want an event object", i, typeName(c))
			}
			return s.skip()
		}
		return m.scanEvent(s, i)
	})
}

// scanEvent reads event i of a body and keeps its name.
func (m *Message) scanEvent(s *scanner, i int) *syntaxError {
	var name rawValue
	err := s.object(func(k span) *syntaxError {
		if !s.is(k, "name") {
			return s.skip()
		}
		var err *syntaxError
		name, err = s.scalar()
		return err
	})
	sc := &m.scratch
	switch {
	case err != nil || sc.bodyErr != "":
	case name.typ == 0:
		sc.bodyErr = fmt.Sprintf("body[%d] has no name", i)
	case name.typ != '"':
		sc.bodyErr = fmt.Sprintf("body[%d].name is %s, want a string", i, typeName(name.typ))
	default:
		sc.events = append(sc.events, name.sp)
	}
	return err
}

// fill checks the fields noted by scan and sets m's fields, or returns why
// the message is not valid.
func (m *Message) fill(data []byte) string {
	sc := &m.scratch
	if sc.top != '{' {
		return "the value is " + typeName(sc.top) + ", want an object"
	}
	required := []int{fID, fContextName, fAggregateName, fAggregateID, fName}
	if m.Kind != KindCommand {
		required = required[:4]
	}
	for _, f := range required {
		switch v := sc.vals[f]; v.typ {
		case 0:
			return "missing " + m.fieldName(f)
		case '"':
		default:
			return m.fieldName(f) + " is " + typeName(v.typ) + ", want a string"
		}
	}
	if v := sc.vals[fAggregateID]; v.sp.start == v.sp.end {
		return "aggregateId is empty"
	}
	for f := range nStrings {
		if v := sc.vals[f]; v.typ != 0 && v.typ != '"' && v.typ != 'n' {
			return m.fieldName(f) + " is " + typeName(v.typ) + ", want a string"
		}
	}
	var nums [2]int64
	for i, f := range []int{fVersion, fCreateTime} {
		switch v := sc.vals[f]; v.typ {
		case 0, 'n':
		case '0':
			n, reason := parseInt(data[v.sp.start:v.sp.end])
			if reason != "" {
				return fmt.Sprintf("%s %s %s", m.fieldName(f), data[v.sp.start:v.sp.end], reason)
			}
			nums[i] = n
		default:
			return m.fieldName(f) + " is " + typeName(v.typ) + ", want an integer"
		}
	}
	if reason := m.checkHeader(data); reason != "" {
		return reason
	}
	if m.Kind != KindCommand {
		if sc.bodyType == 0 {
			return "missing body"
		}
		if sc.bodyErr != "" {
			return sc.bodyErr
		}
	}
	if m.Kind == KindState {
		if reason := stateReason(sc.stateType, sc.deleted); reason != "" {
			return reason
		}
	}
	m.Version, m.CreateTime = nums[0], nums[1]
	m.HasVersion = sc.vals[fVersion].typ == '0'
	m.setStrings(data)
	return ""
}

// stateReason tells why a state event without its state object, or
// without deleted, is none: Wow's StateEventJsonDeserializer takes state as
// an object and reads deleted at once, and cannot read such a record (a
// domain event stream written to a .state topic looks like one).
func stateReason(stateType byte, deleted bool) string {
	switch {
	case stateType == 0:
		return "missing state (a state event carries the aggregate's state)"
	case stateType != '{':
		return "state is " + typeName(stateType) + ", want the aggregate's state, an object"
	case !deleted:
		return "missing deleted"
	}
	return ""
}

func (m *Message) fieldName(f int) string {
	if f == fVersion && m.Kind == KindCommand {
		return "aggregateVersion"
	}
	return fieldNames[f]
}

// checkHeader reports a header that is not an object or a header value
// that is not a string, once duplicates are resolved: only the last value
// of a key counts.
func (m *Message) checkHeader(data []byte) string {
	switch t := m.scratch.headerType; t {
	case 0, 'n', '{':
	default:
		return "header is " + typeName(t) + ", want an object"
	}
	h := m.scratch.header
	if !slices.ContainsFunc(h, func(e headerEntry) bool { return e.typ != '"' }) {
		return ""
	}
	seen := make(map[string]bool) // keys whose last value was checked (no size hint: duplicates may be most of h)
	bad, badKey := -1, ""         // the first key whose last value is not a string
	for i := len(h) - 1; i >= 0; i-- {
		key := string(appendUnquoted(nil, data[h[i].key.start:h[i].key.end]))
		if !seen[key] {
			seen[key] = true
			if h[i].typ != '"' {
				bad, badKey = i, key
			}
		}
	}
	if bad < 0 {
		return ""
	}
	return fmt.Sprintf("header %q is %s, want a string", badKey, typeName(h[bad].typ))
}

// setStrings copies the string fields, the header and the event names into
// one buffer and sets them on m.
func (m *Message) setStrings(data []byte) {
	sc := &m.scratch
	size := 0
	for f := range nStrings {
		if v := sc.vals[f]; v.typ == '"' {
			size += v.sp.end - v.sp.start
		}
	}
	for _, e := range sc.header {
		size += e.key.end - e.key.start + e.val.end - e.val.start
	}
	for _, sp := range sc.events {
		size += sp.end - sp.start
	}
	w := stringWriter{ends: sc.ends[:0]}
	w.b.Grow(size)
	for f := range nStrings {
		if v := sc.vals[f]; v.typ == '"' {
			w.add(data, v.sp)
		} else {
			w.ends = append(w.ends, w.b.Len())
		}
	}
	for _, e := range sc.header {
		if e.typ == '"' {
			w.add(data, e.key)
			w.add(data, e.val)
		}
	}
	for _, sp := range sc.events {
		w.add(data, sp)
	}
	all := w.b.String()
	start, i := 0, 0
	next := func() string {
		s := all[start:w.ends[i]]
		start = w.ends[i]
		i++
		return s
	}
	m.ID, m.Name, m.ContextName, m.AggregateName = next(), next(), next(), next()
	m.AggregateID, m.TenantID, m.RequestID, m.CommandID = next(), next(), next(), next()
	for _, e := range sc.header {
		if e.typ == '"' {
			m.setHeader(next(), next())
		}
	}
	for range sc.events {
		m.Events = append(m.Events, next())
	}
	sc.ends = w.ends
	if sc.index != nil {
		clear(sc.index)
	}
}

// maxLinearHeader is the header size up to which duplicates are found by
// scanning rather than with a map.
const maxLinearHeader = 32

// setHeader adds a header field, or replaces the value of an earlier field
// with the same key.
func (m *Message) setHeader(key, value string) {
	if len(m.Header) < maxLinearHeader {
		for i := range m.Header {
			if m.Header[i].Key == key {
				m.Header[i].Value = value
				return
			}
		}
	} else {
		sc := &m.scratch
		if sc.index == nil {
			sc.index = make(map[string]int)
		}
		if len(sc.index) == 0 {
			for i, f := range m.Header {
				sc.index[f.Key] = i
			}
		}
		if i, ok := sc.index[key]; ok {
			m.Header[i].Value = value
			return
		}
		sc.index[key] = len(m.Header)
	}
	m.Header = append(m.Header, HeaderField{Key: key, Value: value})
}

// HeaderValue returns the value of the header key and whether it is set.
func (m *Message) HeaderValue(key string) (string, bool) {
	for i := range m.Header {
		if m.Header[i].Key == key {
			return m.Header[i].Value, true
		}
	}
	return "", false
}

// LocalFirst reports whether the header local_first is "true", ignoring
// case, as Wow's isLocalFirst (Kotlin's String?.toBoolean()) reads it: the
// sending service delivered the message to its own handlers in-process
// before publishing it.
func (m *Message) LocalFirst() bool {
	v, _ := m.HeaderValue(HeaderLocalFirst)
	return strings.EqualFold(v, "true")
}

// Compensation is the target of a compensation: a message redelivered by
// Wow's compensation service for one function only.
type Compensation struct {
	ID        string // compensate.id
	Context   string // compensate.context: the function's bounded context
	Processor string // compensate.processor
	Function  string // compensate.function
}

// Compensation returns the compensation target of the message, and whether
// it is one: whether the header compensate.id is present, as in Wow's
// CompensationMatcher.
func (m *Message) Compensation() (Compensation, bool) {
	id, ok := m.HeaderValue(HeaderCompensationID)
	if !ok {
		return Compensation{}, false
	}
	c := Compensation{ID: id}
	c.Context, _ = m.HeaderValue(HeaderCompensationContext)
	c.Processor, _ = m.HeaderValue(HeaderCompensationProcessor)
	c.Function, _ = m.HeaderValue(HeaderCompensationFunction)
	return c, true
}

// Matches reports whether the compensation targets the function of
// processor in context, the only one that may handle the message.
func (c Compensation) Matches(context, processor, function string) bool {
	return c.Context == context && c.Processor == processor && c.Function == function
}

// Errors of [Message.Check], as Wow reports them on receipt.
var (
	ErrKeyMismatch   = errors.New("the record key does not match the decoded aggregate id")
	ErrTopicMismatch = errors.New("the record topic does not match the decoded aggregate")
)

// Check repeats the checks Wow makes on every record it receives: the
// record key is the message's aggregate id, and the message belongs to the
// aggregate whose topic it came from (contextName is that context's name,
// not its alias). Errors wrap [ErrKeyMismatch] or [ErrTopicMismatch].
//
// Wow compares topic names, computed through the context's alias; this
// compares names, which differs only for a message whose contextName is
// unknown to the metadata but equals another context's alias.
func (m *Message) Check(recordKey []byte, contextName, aggregateName string) error {
	if string(recordKey) != m.AggregateID {
		return fmt.Errorf("%w: key %q, aggregateId %q", ErrKeyMismatch, recordKey, m.AggregateID)
	}
	if m.ContextName != contextName || m.AggregateName != aggregateName {
		return fmt.Errorf("%w: the topic is for %s.%s, the message for %s.%s",
			ErrTopicMismatch, contextName, aggregateName, m.ContextName, m.AggregateName)
	}
	return nil
}
