package receiver

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/wowd/wowd/internal/executor"
	"github.com/wowd/wowd/internal/park"
)

// What the admin API shows of a receiver. Everything here reads; nothing
// changes the receiver.
//
// Locks: Status takes partsMu (read) to list the partitions, then each
// partition.mu in turn, briefly, never two at once and never commitMu, so it
// keeps the order commitMu → partsMu → partition.mu. The executor's shard
// locks (HotKeys) and the client's group lock (GroupMetadata,
// CommittedOffsets) are taken with no receiver lock held; the parking
// lock (parkState.mu, a leaf) only to copy the parked aggregates.

// Why a receiver stopped fetching as a whole (Status.Paused).
const (
	PausedWindowFull  = "window_full"  // max-in-flight unfinished records: waits for a sixteenth of the window
	PausedSinkBackoff = "sink_backoff" // most recent handler attempts failed: fetching waits for the backoff delay
	PausedParkedCap   = "parked_cap"   // max-parked aggregates parked and another must park: fetching waits for an unpark
	PausedRecordsHeld = "records_held" // fetched records that wait for room in the window or their partition's share fill the receiver's part of the memory budget, or reach twice its window
)

// oldestScan is the most tracker entries Status reads per partition when
// looking for the oldest unfinished records: the oldest are at the head,
// so a stuck record is found first; finished records behind it are read
// past, up to this bound.
const oldestScan = 1024

// Status is a receiver as the admin API shows it.
type Status struct {
	Dispatcher string
	Context    string
	GroupID    string
	// MemberID and Generation are the receiver's membership in its group:
	// "" and -1 while it has none.
	MemberID   string
	Generation int32
	Joined     bool // a member now: assigned since it last lost its membership
	InFlight   int  // unfinished records: queued or running
	// MaxInFlight is the window (wow.dispatch.max-in-flight).
	MaxInFlight int
	// Paused is why fetching stopped for every partition: "",
	// PausedWindowFull, PausedSinkBackoff, PausedParkedCap or
	// PausedRecordsHeld. Partitions may also be paused
	// on their own (PartitionStatus.Paused).
	Paused string
	// BackoffDelay is the current backoff while Paused is
	// PausedSinkBackoff.
	BackoffDelay time.Duration
	// Parks says the dispatcher parks failed aggregates (on-failure:
	// park), so an aggregate may be parked by hand; DeadLetters that its
	// dead letters are on, which a skip or discard of a parked aggregate
	// needs.
	Parks, DeadLetters bool
	Partitions         []PartitionState
	// Hot are the aggregates with the most unfinished records in this
	// receiver's mailboxes (see executor.HotKeys for the bound), largest
	// first.
	Hot []AggregateLoad
	// Oldest are the aggregates whose oldest unfinished record is the
	// oldest, oldest first.
	Oldest []AggregateAge
}

// PartitionState is an owned partition's status and where its assignment
// started.
type PartitionState struct {
	PartitionStatus
	// First is the first offset this incarnation delivered, -1 before one:
	// where the group resumed, when it has no committed offset yet.
	First int64
}

// AggregateLoad is an aggregate with unfinished records.
type AggregateLoad struct {
	Aggregate  string // aggregate type
	ID         string // aggregate ID (the record key)
	Unfinished int
}

// AggregateAge is an aggregate's oldest unfinished record.
type AggregateAge struct {
	Aggregate string // aggregate type
	ID        string // aggregate ID (the record key)
	Topic     string
	Partition int32
	Offset    int64
	// Timestamp is the record's Kafka timestamp: its age is how long ago
	// it was produced.
	Timestamp time.Time
}

// Status returns the receiver's state with up to top hot and oldest
// aggregates. Its cost is bounded by the configuration, not by the
// traffic: the partitions owned, oldestScan records of each, and the
// executor's candidates.
func (r *Receiver) Status(top int) Status {
	s := Status{
		Dispatcher:  r.o.Dispatcher,
		Context:     r.o.Context,
		GroupID:     r.o.GroupID,
		Joined:      r.joined.Load(),
		InFlight:    int(r.inFlight.Load()),
		MaxInFlight: int(r.window),
		Parks:       r.park != nil,
		DeadLetters: r.o.DeadLetter.Enabled,
	}
	s.MemberID, s.Generation = r.cl.GroupMetadata()
	if r.paused.Load() {
		switch topicPause(r.pausedFor.Load()) {
		case pauseParkedCap:
			s.Paused = PausedParkedCap
		case pauseBackoff:
			s.Paused, s.BackoffDelay = PausedSinkBackoff, r.fails.current()
		case pauseRecordsHeld:
			s.Paused = PausedRecordsHeld
		default:
			s.Paused = PausedWindowFull
		}
	}
	first := make(map[tp]int64)
	for _, p := range r.active() {
		p.mu.Lock()
		first[tp{p.topic, p.partition}] = p.first
		p.mu.Unlock()
	}
	for _, ps := range r.Partitions() {
		f, ok := first[tp{ps.Topic, ps.Partition}]
		if !ok {
			f = -1
		}
		s.Partitions = append(s.Partitions, PartitionState{PartitionStatus: ps, First: f})
	}
	if len(s.Partitions) > 0 {
		// Before this assignment's first commit, the group's offset: what a
		// restart would resume from either way.
		committed := r.cl.CommittedOffsets()
		for i := range s.Partitions {
			ps := &s.Partitions[i]
			if ps.Committed < 0 {
				if eo, ok := committed[ps.Topic][ps.Partition]; ok {
					ps.Committed = eo.Offset
				}
			}
		}
	}
	if top <= 0 {
		return s
	}
	s.Oldest = r.oldest(top)
	byGroup := make(map[uint32]string, len(r.routes))
	for _, rt := range r.routes {
		byGroup[rt.Group.ID()] = rt.Aggregate
	}
	for _, h := range executor.HotKeys(top, r.groups...) {
		s.Hot = append(s.Hot, AggregateLoad{Aggregate: byGroup[h.Group], ID: h.Key, Unfinished: h.Unfinished})
	}
	return s
}

// oldest returns up to n aggregates by the age of their oldest unfinished
// record, oldest first, from the first oldestScan records of each owned
// partition.
func (r *Receiver) oldest(n int) []AggregateAge {
	var all []AggregateAge
	for _, p := range r.active() {
		seen := make(map[string]bool)
		p.mu.Lock()
		if p.closed.Load() {
			// Its tracker is no longer kept up to date: its jobs may be
			// carrying other records already.
			p.mu.Unlock()
			continue
		}
		for i := range min(p.tr.q.Len(), oldestScan) {
			e := p.tr.q.At(i)
			if e.done || e.j == nil {
				continue
			}
			// While p is open, a job leaves its entry (under p.mu) before it
			// is reset: its key, route and record copy stay as they are.
			j := e.j
			if j.route == nil || seen[j.msg.AggregateID] {
				continue
			}
			seen[j.msg.AggregateID] = true
			all = append(all, AggregateAge{Aggregate: j.route.Aggregate, ID: j.msg.AggregateID, Topic: p.topic,
				Partition: p.partition, Offset: e.offset, Timestamp: j.rec.Timestamp})
			if len(seen) == n {
				break
			}
		}
		p.mu.Unlock()
	}
	slices.SortFunc(all, func(a, b AggregateAge) int {
		return cmp.Or(a.Timestamp.Compare(b.Timestamp), strings.Compare(a.Topic, b.Topic),
			cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
	})
	// One aggregate may have records in several topics (its events and its
	// state): keep its oldest.
	seen := make(map[[2]string]bool, len(all))
	out := all[:0]
	for _, a := range all {
		k := [2]string{a.Aggregate, a.ID}
		if !seen[k] && len(out) < n {
			seen[k] = true
			out = append(out, a)
		}
	}
	return out
}

// ParkedAggregate is an aggregate the receiver's dispatcher parked in one
// of the receiver's topics.
type ParkedAggregate struct {
	park.State
	Context       string // the receiver's bounded context
	AggregateType string // the aggregate of its source topic
	// Owned says its partition is the receiver's: its parked messages are
	// redriven here. The others are in partitions of other members of the
	// group (or of none, between assignments), as the state topic says.
	Owned bool
	// Busy says an action (redrive, skip, discard) is under way, or asked
	// for and not yet taken up by the partition's owner.
	Busy bool
}

// Parked returns the aggregates the dispatcher parked in the receiver's
// topics, in every partition, longest parked first; nil without parking.
// Those of the partitions whose parked aggregates the receiver loaded
// (parkState.loaded) are its own, current to its last write; the others
// are as the state topic's tail read them, so they are listed only once it
// read the whole topic. Both are chosen under the parking lock, so each
// aggregate is listed once. It takes partsMu (read) to list the owned
// partitions, then the parking lock (a leaf) while it copies the
// aggregates.
func (r *Receiver) Parked() []ParkedAggregate {
	ps := r.park
	if ps == nil {
		return nil
	}
	owned := map[tp]bool{}
	r.partsMu.RLock()
	for k, p := range r.parts {
		if !p.isClosed() {
			owned[k] = true
		}
	}
	r.partsMu.RUnlock()
	ps.mu.RLock()
	out := make([]ParkedAggregate, 0, len(ps.parked))
	add := func(st park.State, busy bool) {
		pa := ParkedAggregate{State: st, Context: r.o.Context, Owned: owned[tp{st.Topic, st.Partition}], Busy: busy}
		if rt := r.routes[st.Topic]; rt != nil {
			pa.AggregateType = rt.Aggregate
		}
		out = append(out, pa)
	}
	asked := func(topic, key string) bool {
		req := ps.book.Request(topic, key)
		return req != nil && req.Request != nil && req.Request.Action != park.Park
	}
	for k, a := range ps.parked {
		if ps.loaded[tp{k.topic, a.state.Partition}] {
			add(a.state, a.busy || asked(k.topic, k.key))
		}
	}
	if ps.caughtUp.Load() {
		for _, st := range ps.book.All() {
			if !ps.loaded[tp{st.Topic, st.Partition}] {
				add(*st, asked(st.Topic, st.Aggregate))
			}
		}
	}
	ps.mu.RUnlock()
	slices.SortFunc(out, func(a, b ParkedAggregate) int {
		return cmp.Or(a.Since.Compare(b.Since), strings.Compare(a.Topic, b.Topic), strings.Compare(a.Aggregate, b.Aggregate))
	})
	return out
}

// AskParked asks for action (park.Redrive, park.Skip or park.Discard) on
// each aggregate with ID id that Parked lists (one per source topic it is
// parked on), by writing the request to the state topic, as `wowd parked`
// does; the partition's owner, this receiver or another member, acts on it
// when its tail reads it. It returns how many it asked for.
func (r *Receiver) AskParked(ctx context.Context, id, action, by string) (int, error) {
	n := 0
	asked := map[string]bool{}
	for _, pa := range r.Parked() {
		if pa.Aggregate != id || asked[pa.Topic] {
			continue // once per topic, whatever the list holds
		}
		asked[pa.Topic] = true
		if err := park.Ask(ctx, r.cl, r.o.Park.StateTopic, &pa.State, action, by); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
