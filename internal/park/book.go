package park

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Owner epochs fence the writes of a member that lost a partition without
// knowing it yet: cut off from Kafka, its client may deliver a parking
// write it started long before, after another member took the partition
// over. A state topic record carries the epoch of the ownership that wrote
// it, and a partition's owner, before it handles anything, writes an owner
// record with an epoch above every one the topic holds for the partition
// (see Book.NextEpoch). Readers keep an aggregate's state only at the
// highest owner epoch of its partition or above; a state written late from
// an earlier ownership is passed over. So that the states the new owner
// takes over stay valid, it writes them again at its epoch (adopts them)
// before its owner record.
//
// The epoch is part of the keys of states (StateKey) and of owner records
// (OwnerKey), so that a late record of an earlier ownership, a tombstone
// included, replaces only that ownership's record, never the current one,
// however the topic is compacted. States written before epochs existed have
// epoch 0 and the key Key(topic, aggregate).

// ownerPrefix starts the key of an owner record; '!' is in no topic name.
const ownerPrefix = "!owner/"

// OwnerKey returns the key of the owner record of a source partition at
// epoch.
func OwnerKey(topic string, partition int32, epoch int64) string {
	return ownerPrefix + topic + "/" + strconv.Itoa(int(partition)) + "#" + strconv.FormatInt(epoch, 10)
}

// parseOwnerKey splits the key of an owner record.
func parseOwnerKey(key string) (partKey, int64, error) {
	rest := strings.TrimPrefix(key, ownerPrefix)
	i, j := strings.LastIndexByte(rest, '/'), strings.LastIndexByte(rest, '#')
	bad := errors.New("parking owner record key " + key + ": want " + ownerPrefix + "<topic>/<partition>#<epoch>")
	if i <= 0 || j < i {
		return partKey{}, 0, bad
	}
	p, perr := strconv.ParseInt(rest[i+1:j], 10, 32)
	e, eerr := strconv.ParseInt(rest[j+1:], 10, 64)
	if perr != nil || eerr != nil || p < 0 || e <= 0 {
		return partKey{}, 0, bad
	}
	return partKey{rest[:i], int32(p)}, e, nil
}

// IsOwnerKey reports whether a state-topic key is an owner record's.
func IsOwnerKey(key string) bool { return strings.HasPrefix(key, ownerPrefix) }

// owner is the value of an owner record; it decodes as a State with no
// aggregate.
type owner struct {
	Service    string `json:"service"`
	Dispatcher string `json:"dispatcher"`
	Topic      string `json:"topic"`
	Partition  int32  `json:"partition"`
	Epoch      int64  `json:"epoch"`
}

// OwnerRecord returns the owner record, for the state topic stateTopic,
// of a source partition taken at epoch.
func OwnerRecord(stateTopic, service, dispatcher, topic string, partition int32, epoch int64) *kgo.Record {
	v, err := json.Marshal(owner{service, dispatcher, topic, partition, epoch})
	if err != nil {
		panic(err) // plain fields: cannot fail
	}
	return &kgo.Record{Topic: stateTopic, Key: []byte(OwnerKey(topic, partition, epoch)), Value: v}
}

// StateKey returns the key of an aggregate's state written at epoch.
func StateKey(topic string, epoch int64, aggregate string) string {
	if epoch == 0 {
		return Key(topic, aggregate)
	}
	return topic + "#" + strconv.FormatInt(epoch, 10) + "/" + aggregate
}

// RecordKey returns the key of the state's record: StateKey of its topic,
// epoch and aggregate.
func (s *State) RecordKey() string { return StateKey(s.Topic, s.Epoch, s.Aggregate) }

// ParseStateKey splits the key of a state record (not a request's or an
// owner record's) into its source topic, epoch and aggregate ID.
func ParseStateKey(key string) (topic string, epoch int64, aggregate string, err error) {
	head, aggregate, ok := strings.Cut(key, "/")
	if !ok || head == "" {
		return "", 0, "", errors.New("parked state key " + key + ": want <topic>[#<epoch>]/<aggregate id>")
	}
	topic, e, hasEpoch := strings.Cut(head, "#")
	if hasEpoch {
		if epoch, err = strconv.ParseInt(e, 10, 64); err != nil || epoch <= 0 {
			return "", 0, "", errors.New("parked state key " + key + ": the epoch is not a positive number")
		}
	}
	return topic, epoch, aggregate, nil
}

// partKey names a source partition.
type partKey struct {
	topic     string
	partition int32
}

// Book is what a state topic says once read in order: the parked
// aggregates, the operators' pending requests and the partitions' owner
// epochs. It is not safe for concurrent use.
type Book struct {
	// states are the records of each aggregate by Key(topic, aggregate),
	// then by epoch: one, or two while a new owner adopts it.
	states map[string]map[int64]*State
	// requests are the pending requests of each aggregate by Key(topic,
	// aggregate), in the order the topic holds them: the last is the one
	// to act on. requestOf names the aggregate of each request's key.
	requests  map[string][]request
	requestOf map[string]string
	// owners are the epochs of each partition's owner records; the
	// highest fences the partition's states.
	owners  map[partKey]map[int64]bool
	highest map[partKey]int64 // the highest epoch of any record of the partition
}

// request is a pending request and the key of its record.
type request struct {
	key string
	s   *State
}

// NewBook returns an empty book.
func NewBook() *Book {
	return &Book{states: make(map[string]map[int64]*State), requests: make(map[string][]request), requestOf: make(map[string]string),
		owners: make(map[partKey]map[int64]bool), highest: make(map[partKey]int64)}
}

// Apply reads the next record of the state topic: key and its decoded
// value (nil for a tombstone). It returns an error for a tombstone whose
// key it cannot read.
func (b *Book) Apply(key string, s *State) error {
	switch {
	case IsRequestKey(key):
		b.dropRequest(key)
		if s != nil {
			b.requests[s.Key()] = append(b.requests[s.Key()], request{key, s})
			b.requestOf[key] = s.Key()
		}
		return nil
	case IsOwnerKey(key):
		pk, epoch, err := parseOwnerKey(key)
		if err != nil {
			return err
		}
		if s == nil {
			delete(b.owners[pk], epoch)
			return nil
		}
		if b.owners[pk] == nil {
			b.owners[pk] = make(map[int64]bool, 1)
		}
		b.owners[pk][epoch] = true
		b.highest[pk] = max(b.highest[pk], epoch)
		return nil
	case s == nil:
		topic, epoch, aggregate, err := ParseStateKey(key)
		if err != nil {
			return err
		}
		k := Key(topic, aggregate)
		delete(b.states[k], epoch)
		if len(b.states[k]) == 0 {
			delete(b.states, k)
		}
		return nil
	}
	k := s.Key()
	if b.states[k] == nil {
		b.states[k] = make(map[int64]*State, 1)
	}
	b.states[k][s.Epoch] = s
	pk := partKey{s.Topic, s.Partition}
	b.highest[pk] = max(b.highest[pk], s.Epoch)
	return nil
}

// fence returns the highest owner epoch of a partition (0 without one).
func (b *Book) fence(pk partKey) int64 {
	var f int64
	for e := range b.owners[pk] {
		f = max(f, e)
	}
	return f
}

// OwnerEpoch returns the highest owner epoch of a source partition the
// book holds (0 without one): states of lower epochs are passed over.
func (b *Book) OwnerEpoch(topic string, partition int32) int64 {
	return b.fence(partKey{topic, partition})
}

// valid returns the aggregate's current state: of the highest epoch at or
// above its partition's fence, or nil.
func (b *Book) valid(records map[int64]*State) *State {
	var cur *State
	for e, s := range records {
		if e >= b.fence(partKey{s.Topic, s.Partition}) && (cur == nil || e > cur.Epoch) {
			cur = s
		}
	}
	return cur
}

// Parked returns the state of the aggregate of topic, or nil when it is
// not parked.
func (b *Book) Parked(topic, aggregate string) *State {
	return b.valid(b.states[Key(topic, aggregate)])
}

// All returns the parked aggregates by Key(topic, aggregate).
func (b *Book) All() map[string]*State {
	out := make(map[string]*State, len(b.states))
	for k, records := range b.states {
		if s := b.valid(records); s != nil {
			out[k] = s
		}
	}
	return out
}

// Partition returns the parked aggregates of a source partition, and the
// keys of its records that are not current: states of earlier epochs or
// written late by an earlier owner, and owner records below the highest.
// The partition's next owner adopts the first and, once its own owner
// record is written, deletes the second.
func (b *Book) Partition(topic string, partition int32) (parked []*State, old []string) {
	for _, records := range b.states {
		cur := b.valid(records)
		for _, s := range records {
			switch {
			case s.Topic != topic || s.Partition != partition:
			case s == cur:
				parked = append(parked, s)
			default:
				old = append(old, s.RecordKey())
			}
		}
	}
	pk := partKey{topic, partition}
	for e := range b.owners[pk] {
		if e < b.fence(pk) {
			old = append(old, OwnerKey(topic, partition, e))
		}
	}
	return parked, old
}

// generationShift places the consumer group's generation above the
// ownerships taken within one generation in an owner epoch (see NextEpoch).
const generationShift = 20

// NextEpoch returns the epoch the next owner of a source partition takes:
// above every epoch the book holds for it, and at least generation (the
// consumer group's generation that assigned it) shifted by
// generationShift, so that two members that both read the topic before
// either wrote still take different epochs, the later generation's the
// higher. A partition can be taken several times within one generation (a
// rewind, a stale incarnation taken again), each time one above the
// highest; without the shift those epochs passed the next generations, and
// an owner of the next generation and a late writer of the earlier one
// that had read the same book took the same epoch, their states replacing
// each other's under the same keys (found by review). Only a generation
// that went back (the group deleted and created again) gives way to the
// highest epoch here.
func (b *Book) NextEpoch(topic string, partition int32, generation int64) int64 {
	return max(generation<<generationShift, b.highest[partKey{topic, partition}]+1)
}

// dropRequest forgets the request of a record key, if the book has it.
func (b *Book) dropRequest(key string) {
	agg, ok := b.requestOf[key]
	if !ok {
		return
	}
	delete(b.requestOf, key)
	rs := slices.DeleteFunc(b.requests[agg], func(r request) bool { return r.key == key })
	if len(rs) == 0 {
		delete(b.requests, agg)
	} else {
		b.requests[agg] = rs
	}
}

// Request returns the pending request on the aggregate of topic, the last
// written of them, or nil.
func (b *Book) Request(topic, aggregate string) *State {
	rs := b.requests[Key(topic, aggregate)]
	if len(rs) == 0 {
		return nil
	}
	return rs[len(rs)-1].s
}

// RequestKeys returns the record keys of the pending requests on the
// aggregate of topic up to the one with ID id, in the order the topic
// holds them: those the request id answers (it and the ones it followed),
// and nil when it is not pending. Deleted in that order, no request
// written before the last one deleted can become the aggregate's pending
// request again.
func (b *Book) RequestKeys(topic, aggregate, id string) []string {
	rs := b.requests[Key(topic, aggregate)]
	for i, r := range rs {
		if r.s.Request != nil && r.s.Request.ID == id {
			keys := make([]string, 0, i+1)
			for _, r := range rs[:i+1] {
				keys = append(keys, r.key)
			}
			return keys
		}
	}
	return nil
}

// Requests returns the pending request of each aggregate of a source
// partition that has one.
func (b *Book) Requests(topic string, partition int32) []*State {
	var out []*State
	for _, rs := range b.requests {
		if req := rs[len(rs)-1].s; req.Topic == topic && req.Partition == partition {
			out = append(out, req)
		}
	}
	return out
}

// AllRequests returns the pending request of each aggregate that has one,
// by Key(topic, aggregate).
func (b *Book) AllRequests() map[string]*State {
	out := make(map[string]*State, len(b.requests))
	for k, rs := range b.requests {
		out[k] = rs[len(rs)-1].s
	}
	return out
}
