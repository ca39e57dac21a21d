// Package park holds what parking an aggregate writes to Kafka and how it is
// read back: the parked topic of a source topic, where an aggregate's failed
// message and its later messages wait in order, and the state topic of a
// dispatcher, a compacted topic with one record per parked aggregate (a
// tombstone once it is unparked) and one per owned source partition (its
// owner epoch, see Book), on which operators also ask for a redrive, skip
// or discard.
//
// The receiver that owns an aggregate's source partition is the only writer
// of the aggregate's parked messages and of its state, except for requests:
// `wowd parked` writes the state back with a Request, and the owner acts on
// it and writes the state without one.
package park

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Headers a parked record carries, besides the source record's own.
const (
	HeaderService         = "wowd-parked-service" // wow.service: <topic>.parked is shared by the services reading topic
	HeaderDispatcher      = "wowd-parked-dispatcher"
	HeaderReason          = "wowd-parked-reason"
	HeaderClass           = "wowd-parked-class"
	HeaderAttempts        = "wowd-parked-attempts"
	HeaderSourceTopic     = "wowd-parked-source-topic"
	HeaderSourcePartition = "wowd-parked-source-partition"
	HeaderSourceOffset    = "wowd-parked-source-offset"
	HeaderSince           = "wowd-parked-since" // when the aggregate was parked, RFC 3339 with milliseconds
)

// HeaderPrefix starts every header parking adds; a redrive removes them
// before the handler sees the message.
const HeaderPrefix = "wowd-parked-"

// Topic returns the parked topic of a source topic.
func Topic(source string) string { return source + ".parked" }

// StateTopic returns the state topic of a service's dispatcher.
func StateTopic(service, dispatcher string) string {
	return "wowd-parked." + service + "." + dispatcher
}

// Actions an operator can ask for.
const (
	Redrive = "redrive" // handle the parked messages in order, then unpark
	Skip    = "skip"    // dead-letter the head, redrive the rest
	Discard = "discard" // dead-letter every parked message, unpark
	Park    = "park"    // park an aggregate that is not: its next messages wait
)

// Position is a record's place in a topic.
type Position struct {
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
}

// State is a parked aggregate: the value of its record in the state topic.
type State struct {
	Service    string `json:"service"`
	Dispatcher string `json:"dispatcher"`
	// Topic and Partition are the aggregate's source topic and partition;
	// Offset is the source offset of the message that parked it (parked
	// by hand: of the first of the aggregate's records not handled before
	// the park; -1 in states written before 2026-12-07); a redrive's
	// progress moves it past the messages it redrove. The aggregate's records below it are resolved: one
	// delivered again is skipped, a parked copy below it is a duplicate.
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Aggregate string `json:"aggregate"`
	// AggregateBytes holds the aggregate ID, in base64, where it is not
	// valid UTF-8 (an ID parked by hand as %FF): JSON would
	// replace its bytes, and the state would no longer match its key.
	// Set by Marshal and read by Unmarshal only; Aggregate holds the ID.
	AggregateBytes []byte `json:"aggregate_bytes,omitempty"`
	// Head is where the aggregate's oldest parked message not yet redriven
	// is in the parked topic; later messages of the aggregate follow it
	// there, in order, interleaved with other aggregates'.
	Head     Position  `json:"head"`
	Since    time.Time `json:"since"`
	Class    string    `json:"class"`
	Reason   string    `json:"reason"`
	Attempts int       `json:"attempts"`
	// Epoch is the owner epoch of the ownership of the source partition
	// that wrote the state (see book.go); 0 for states written before
	// epochs existed.
	Epoch int64 `json:"epoch,omitempty"`
	// Skipped is set once an action's progress moved Head past the
	// message that failed (a redrive handed it over, a skip or discard
	// dead-lettered it): Head is then a message that has not failed, and
	// a skip (resumed by the partition's next owner, asked again, or
	// asked after a redrive or discard cut short) dead-letters nothing
	// more: it redrives from Head. Class, Reason, Since and Attempts stay
	// those of the message that failed. A message that fails again
	// becomes the head with Skipped false. Absent (false) in states
	// written before it existed, and earlier versions that know it set it
	// after a skip's progress only: their redrive's progress leaves it
	// false, so a skip of such a state dead-letters Head as before.
	Skipped bool `json:"skipped,omitempty"`
	// Answered is the ID of the request whose action wrote this state
	// with a head that failed again. The action deletes its request after
	// this state; should that delete be lost (the partition closed between
	// the two writes), the owner deletes the request instead of doing it
	// a second time on the new head. Absent in states written before it
	// existed: older versions do such a request again.
	Answered string `json:"answered,omitempty"`
	// Request is an operator's pending action, if any.
	Request *Request `json:"request,omitempty"`
}

// Request is an action an operator asked for.
type Request struct {
	Action string    `json:"action"`
	By     string    `json:"by"` // who asked: user@host, or the admin API's caller
	At     time.Time `json:"at"`
	ID     string    `json:"id"` // tells two requests of the same action apart
}

// Key names the state's aggregate: its source topic and aggregate ID
// (topic names cannot contain '/'). It is the key of requests on the
// aggregate (after a prefix) and of states written before owner epochs;
// RecordKey is the key of the state's record.
// ClassByHand is the class of an aggregate parked by hand (Park): no
// message of it failed.
const ClassByHand = "by-hand"

// HeadFailed reports whether the head is a message that failed: what a
// skip dead-letters. Not once an action's progress moved the head past it
// (Skipped), nor for an aggregate parked by hand, whose head is the first
// message that came after the park.
func (s *State) HeadFailed() bool { return !s.Skipped && s.Class != ClassByHand }

// HeadPastFailure reports whether an action's progress moved the head
// past the message that failed: Offset is where the parked messages start
// now, Class and Reason are still the failed message's.
func (s *State) HeadPastFailure() bool { return s.Skipped && s.Class != ClassByHand }

func (s *State) Key() string { return Key(s.Topic, s.Aggregate) }

// Key returns the state key of an aggregate of a source topic.
func Key(topic, aggregate string) string { return topic + "/" + aggregate }

// requestPrefix starts the key of an operator's request: '!' is in no topic
// name, so a request never shares a key with a state. Requests have keys of
// their own so that one written after its aggregate was unparked (a stale
// `wowd parked` run) cannot park the aggregate again.
//
// Each request has a key of its own too, with its ID
// (`!request/<topic>#<id>/<aggregate>`), so that the owner's delete of a
// request it acted on removes that request only: with one key per
// aggregate, a delete written (or delivered late) after an operator asked
// again removed the newer request, which was then never acted on. Requests
// written before had the key `!request/<topic>/<aggregate>` (id "").
const requestPrefix = "!request/"

// RequestKey returns the key of the request id on an aggregate of a source
// topic; id "" gives the key of requests written before requests had their
// own keys. An id has no '/' (Ask makes it of letters and digits).
func RequestKey(topic, aggregate, id string) string {
	if id == "" {
		return requestPrefix + Key(topic, aggregate)
	}
	return requestPrefix + topic + "#" + id + "/" + aggregate
}

// ParseRequestKey splits the key of a request into its source topic, its
// request ID ("" in the key of an earlier version) and aggregate ID.
func ParseRequestKey(key string) (topic, id, aggregate string, err error) {
	head, aggregate, ok := strings.Cut(strings.TrimPrefix(key, requestPrefix), "/")
	topic, id, _ = strings.Cut(head, "#")
	if !ok || topic == "" {
		return "", "", "", errors.New("parked-aggregate request key " + key + ": want " + requestPrefix + "<topic>[#<id>]/<aggregate id>")
	}
	return topic, id, aggregate, nil
}

// IsRequestKey reports whether a state-topic key is a request's.
func IsRequestKey(key string) bool { return strings.HasPrefix(key, requestPrefix) }

// Marshal encodes the state as its record value.
func (s *State) Marshal() []byte {
	if !utf8.ValidString(s.Aggregate) {
		c := *s
		c.AggregateBytes = []byte(s.Aggregate)
		s = &c
	}
	b, err := json.Marshal(s)
	if err != nil {
		panic(err) // plain fields: cannot fail
	}
	return b
}

// Unmarshal decodes a record of the state topic: a state, or a request
// (with Request set); key is the record's key, checked against the value.
func Unmarshal(key, value []byte) (*State, error) {
	var s State
	if err := json.Unmarshal(value, &s); err != nil {
		return nil, fmt.Errorf("parked state %q: %w", key, err)
	}
	if s.AggregateBytes != nil {
		s.Aggregate, s.AggregateBytes = string(s.AggregateBytes), nil
	}
	var want string
	switch {
	case IsRequestKey(string(key)):
		if s.Request == nil {
			return nil, fmt.Errorf("parked-aggregate request %q: no request in it", key)
		}
		switch s.Request.Action {
		case Park, Redrive, Skip, Discard:
		default:
			// Not carried out as some other action (a later version's, or
			// written by hand): read as a bad record, left alone.
			return nil, fmt.Errorf("parked-aggregate request %q: unknown action %q (want %s, %s, %s or %s)", key, s.Request.Action, Park, Redrive, Skip, Discard)
		}
		if strings.ContainsAny(s.Request.ID, "/#") {
			return nil, fmt.Errorf("parked-aggregate request %q: its ID %q has '/' or '#'", key, s.Request.ID)
		}
		want = RequestKey(s.Topic, s.Aggregate, s.Request.ID)
		if _, id, _, err := ParseRequestKey(string(key)); err == nil && id == "" {
			want = RequestKey(s.Topic, s.Aggregate, "") // written before requests had keys of their own
		}
	case IsOwnerKey(string(key)):
		s.Request = nil
		want = OwnerKey(s.Topic, s.Partition, s.Epoch)
	default:
		s.Request = nil // requests live under keys of their own
		want = s.RecordKey()
	}
	if want != string(key) {
		return nil, fmt.Errorf("parked state %q: value is of %q", key, want)
	}
	return &s, nil
}

// SplitKey splits a state key into its source topic and aggregate ID.
func SplitKey(key string) (topic, aggregate string, err error) {
	topic, aggregate, ok := strings.Cut(key, "/")
	if !ok || topic == "" {
		return "", "", errors.New("parked state key " + key + ": want <topic>/<aggregate id>")
	}
	return topic, aggregate, nil
}
