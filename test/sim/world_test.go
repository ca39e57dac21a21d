package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zapcore"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/memory"
	"github.com/wowd/wowd/internal/park"
	"github.com/wowd/wowd/internal/receiver"
)

const (
	topic    = "wow.sim.item.event"
	dlqTopic = topic + ".dlq"
	// parkedTopic and stateTopic are where members that park write.
	parkedTopic = topic + ".parked"
	stateTopic  = "wowd-parked.sim.projection"
	group       = "sim.projection.sim"

	// The receivers' timing: short, so that a run's simulated minute holds
	// many rebalances.
	sessionTimeout   = 6 * time.Second
	rebalanceTimeout = 15 * time.Second
	revokeTimeout    = 3 * time.Second
	handlerTimeout   = 2 * time.Second
	commitInterval   = 300 * time.Millisecond
)

// pos is a record's position in the topic.
type pos struct {
	p int32
	o int64
}

// world is one run: the broker, the members, and what the handlers and the
// broker observed. Its methods are safe for concurrent use.
type world struct {
	seed   uint64
	parts  int32
	window int
	park   bool // members park aggregates (on-failure park) instead of dead-lettering
	// maxParked is the members' wow.dispatch park max-parked: 1000 (never
	// reached), or in a third of the parking seeds 2 to 5, so that failed
	// messages wait for room with their receivers' fetching paused.
	maxParked int
	// stallsOn: a third of the commit-failure actions are commit stalls
	// (coordinators that answer no commit for 1-15 s).
	stallsOn bool
	// consumer: the members join with the consumer group protocol
	// (KIP-848) instead of the classic one.
	consumer bool
	// rejoinCutsOn: now and then a member is armed to be cut off the
	// network as it next rejoins the group under its member ID, for
	// longer than its session (see memberWire.rejoinCut); rejoinCuts
	// counts the cuts made.
	rejoinCutsOn bool
	rejoinCuts   int
	// budget, when set, is the memory budget the members' receivers share
	// (wow.memory.limit at its least, 1% for fetches), with values padded
	// by pad bytes, so that they hold fetched records and give them back
	// (shedStuck) as they do when memory is short.
	budget *memory.Budget
	pad    int
	sink   *sinkMode // the members' handler is the HTTP sink (sink_test.go); nil: simHandler
	// blocking: the members' route runs on the executor's blocking pool
	// (blocking_test.go).
	blocking bool
	// blockingRetry: in a blocking run, the members' handler is wrapped in
	// handler.WithRetry, whose retries wait for the pool after each
	// backoff (blocking_test.go).
	blockingRetry bool
	// tryStart holds, in a blocking retry run, when each try (by its
	// context) was handed to the handler (tryClock).
	tryStart sync.Map
	// versionCheck: every record is a Wow event stream, and the members'
	// receivers decode them and check their aggregate versions, parking an
	// aggregate at a gap when the run parks (version_test.go).
	versionCheck bool
	// buffered, when not 0, is the members' clients' MaxBufferedRecords
	// (1 to 3), so that their dead-letter, parked and state writes find
	// the buffer full (kgo.ErrMaxBuffered) and are written again after a
	// backoff, the more so while the broker answers none of them
	// (produceStall).
	buffered int
	c        *kfake.Cluster
	vn       *kfake.VirtualNetwork
	topicID,
	dlqID [16]byte

	bg sync.WaitGroup // goroutines of handlers and timers the run started: waited for at its end
	// over is closed when the run ends, before the broker closes: commits
	// still stalled then are let go.
	over chan struct{}

	mu          sync.Mutex // guards everything below
	crng        *rand.Rand // decides which commits fail; used under mu
	ends        map[int32]int64
	nextFirst   map[string]int   // per key: the sequence number whose first delivery comes next
	produced    map[string][]pos // per key: where each of its records is, by sequence number
	keyOf       map[pos]keySeq   // the key and sequence number of each record produced
	attempts    map[pos]int
	deliveredTo map[pos][]int              // the members each try went to
	commitLog   map[int32][]string         // per partition: the commits the broker received
	commitsBy   map[string]map[int32]int64 // per member ID: the highest offset it committed per partition
	handled     map[pos]int                // successful acknowledgements made
	finished    map[pos]bool               // handled, skipped by the handler, dead-lettered or parked: committable
	settled     map[pos]bool               // handled, skipped by the handler or dead-lettered: done for good
	parked      map[pos]int                // writes to the parked topic the broker acknowledged
	settledSeq  map[string]map[int]bool
	deadLetter  map[pos]int // dead letters the broker acknowledged
	prefix      map[int32]int64
	commitFail  float64 // share of commit requests answered with an error
	// commitStall: until then the coordinator answers no commit; each one
	// it receives meanwhile is processed (applied or refused) only then.
	commitStall time.Time
	lastWake    time.Time // when the last commit stalled is processed: later ones come after it
	// produceStall: until then the brokers answer no write to the
	// dead-letter, parked or state topic; each one received meanwhile is
	// processed only then (with buffered, the members' buffers fill).
	produceStall  time.Time
	produceStalls int // produce stalls the run scheduled
	fullBuffer    int // writes of the members refused for a full buffer (kgo.ErrMaxBuffered), each written again later
	stalls        int // stalls the run scheduled
	describeOut   int // spells in which the group's describes failed (the parking leases went unconfirmed)
	stubs         int // dead letters written without their value (refused as too large)
	// stubAt: stubs of records the simulation had not registered yet when
	// the stub's acknowledgement came, by position, with when it came. A
	// record can be fetched, fail and be dead-lettered before its producer
	// hears its own acknowledgement (ProduceSync waits for every partition's,
	// and another partition's may be retried; a member's network may be cut
	// under its ingest's publish). Without its value, such a stub names no
	// message until the position is registered (registeredLocked settles it
	// then); unresolvedStubs counts those not registered yet.
	stubAt          map[pos]time.Time
	stubPending     map[pos]bool
	unresolvedStubs int
	// deferred: order checks that found an earlier message unsettled while
	// a stub could not be named yet, decided once every position is known
	// (checkDeferredLocked).
	deferred []orderCheck
	// seen counts what the receivers logged of parking's failure paths,
	// and of a membership the coordinator ended: partitions kgo kept
	// across it taken again (retaken), and partitions kgo revoked at the
	// start of the new one let go as lost (droppedRevoke).
	seen        struct{ maxParked, tooLarge, byHand, retaken, droppedRevoke int }
	sinkCancels int // sink closes that canceled requests in flight
	// With the HTTP sink (ratereload_test.go): the limit the sinks run
	// with now, each member's sink's limits since it was built, and when
	// each of its requests reached the server.
	limit       sinkLimit
	rateReloads int
	rates       map[int][]rateEpoch
	arrivals    map[int][]time.Time
	stale       handler.Ack
	local       []localRecord  // records admitted through Admit (the ingest's way in)
	nextLocal   int64          // the next local record's offset (its partition is -1)
	localAt     map[keySeq]pos // where each local record is, by key and sequence number
	ing         *ingestModel   // the ingest's keys, callers and outcomes (ingest_test.go)
	// msgAt is where a message of an ingest key is last known to be: its
	// copy in Kafka, or else its local record, or its direct record.
	msgAt map[keySeq]pos
	// firstHandled: messages handled (successfully) at least once, at any
	// of their positions; maxHandled, per key, the highest of them.
	firstHandled map[keySeq]bool
	maxHandled   map[string]int
	// gap: ingested messages the ingest gave up for good (refused at
	// admission, or given up here and not published): they may never be
	// handled, and count as settled in the order checks.
	gap map[keySeq]bool
	// markedCopy: copies the ingest published marked as handled by the
	// members' dispatcher: finished from the moment they are in the log.
	markedCopy map[pos]bool
	// suspects: commits that passed offsets not yet known to the
	// simulation when the broker received them; each must turn out to be
	// a marked copy (see watchCommits).
	suspects   []suspect
	violations []string
	events     []string      // the run's schedule, for the failure report
	served     map[pos]int   // requests the sink's server got, per record
	openTries  int           // tries given to a sink and not acknowledged yet
	answers    map[int]uint8 // what the sink's server answered, per try (answeredDone, …), to requests whose client still waited
	tries      int           // tries given to a sink so far: the last try's number

	// What allows a record to be handled more than once (see
	// checkDuplicatesLocked), as the receivers report it:
	uncommitted map[int32][]span // per partition: the offsets each closed incarnation took in above its last commit
	late        map[pos]int      // successes acknowledged once the try's deadline may have passed
	cutShort    map[string]int   // per aggregate: redrives cut short (or that failed reading), which start again from their last progress
	rewound     map[int32][]span // per partition: the offsets a client delivered again after it rewound
	lostParts   map[int32]int    // partitions lost by a member

	ver versionSeen // what the version check did, as the receivers log it (version_test.go)

	pr promises // dead letters given up and justified, revokes, deliveries per ownership (promises_test.go)

	poi poisonSeen // records wowd cannot route, and what became of them (poison_test.go)
}

func newWorld(seed uint64) *world {
	return &world{
		seed:         seed,
		over:         make(chan struct{}),
		crng:         rand.New(rand.NewPCG(seed, 7)),
		ends:         map[int32]int64{},
		nextFirst:    map[string]int{},
		produced:     map[string][]pos{},
		keyOf:        map[pos]keySeq{},
		stubAt:       map[pos]time.Time{},
		stubPending:  map[pos]bool{},
		localAt:      map[keySeq]pos{},
		msgAt:        map[keySeq]pos{},
		firstHandled: map[keySeq]bool{},
		maxHandled:   map[string]int{},
		gap:          map[keySeq]bool{},
		markedCopy:   map[pos]bool{},
		attempts:     map[pos]int{},
		deliveredTo:  map[pos][]int{},
		commitLog:    map[int32][]string{},
		commitsBy:    map[string]map[int32]int64{},
		handled:      map[pos]int{},
		finished:     map[pos]bool{},
		settled:      map[pos]bool{},
		parked:       map[pos]int{},
		settledSeq:   map[string]map[int]bool{},
		deadLetter:   map[pos]int{},
		prefix:       map[int32]int64{},
		uncommitted:  map[int32][]span{},
		late:         map[pos]int{},
		cutShort:     map[string]int{},
		rewound:      map[int32][]span{},
		lostParts:    map[int32]int{},
		served:       map[pos]int{},
		rates:        map[int][]rateEpoch{},
		arrivals:     map[int][]time.Time{},
		answers:      map[int]uint8{},
		pr:           newPromises(),
		poi:          newPoisonSeen(),
	}
}

func (w *world) violate(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.violateLocked(format, args...)
}

func (w *world) violateLocked(format string, args ...any) {
	if len(w.violations) < 50 {
		w.violations = append(w.violations, fmt.Sprintf(format, args...))
	}
}

// span is a range of offsets, both ends included.
type span struct{ from, to int64 }

func (w *world) event(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.eventLocked(format, args...)
}

func (w *world) eventLocked(format string, args ...any) {
	w.events = append(w.events, fmt.Sprintf("%8.3fs ", float64(time.Since(start))/1e9)+fmt.Sprintf(format, args...))
}

// start is the bubble's epoch: synctest starts every bubble at the same
// instant.
var start = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// finishLocked marks at finished and moves its partition's finished prefix.
func (w *world) finishLocked(at pos) {
	w.finished[at] = true
	for w.finished[pos{at.p, w.prefix[at.p]}] {
		w.prefix[at.p]++
	}
}

// used keeps ack, already acknowledged, for a later handler that calls it
// again: it must be ignored, whatever record its job carries by then.
func (w *world) used(ack handler.Ack) {
	w.mu.Lock()
	w.stale = ack
	w.mu.Unlock()
}

// settleLocked marks the record at, of key and seq, done for good.
func (w *world) settleLocked(at pos, key string, seq int) {
	w.finishLocked(at)
	w.settled[at] = true
	if w.settledSeq[key] == nil {
		w.settledSeq[key] = map[int]bool{}
	}
	w.settledSeq[key][seq] = true
}

// succeeded records a successful handling of the record at (key, seq),
// before its acknowledgement, of a try handed to the handler at called. The
// first success of a record must come after every earlier record of its
// aggregate is done for good: handled, skipped or dead-lettered (never
// merely parked, never not yet tried).
//
// A success acknowledged handlerTimeout or more after its try began may
// come after the deadline watcher took the try's outcome (it takes a try
// strictly past its deadline, which a handler's retry report only moves
// later): then the acknowledgement is ignored and the record tried again,
// a duplicate of this record alone.
//
// inc is the member's ownership of the partition the try was delivered in
// (nil: none known): the record counts as finished there (see
// finishedInLocked). A success that may have come past the try's deadline
// counts as a failed try too, which the receiver may have dead-lettered.
func (w *world) succeeded(at pos, key string, seq int, called time.Time, inc *incarnation) {
	late := time.Since(called) >= handlerTimeout
	w.mu.Lock()
	if late {
		w.late[at]++
	}
	if time.Since(called) >= triedLate {
		w.tryFailedLocked(at, called)
	}
	w.finishedInLocked(inc, at, called)
	if ks := (keySeq{key, seq}); !w.firstHandled[ks] {
		// The message's first success, at whichever of its positions (an
		// ingested message's local record or its copy in Kafka).
		var unsettled []int
		for s := range seq {
			if !w.settledSeq[key][s] {
				unsettled = append(unsettled, s)
			}
		}
		switch {
		case len(unsettled) == 0:
		case w.unresolvedStubs > 0:
			// One of them may be a stub not named yet.
			w.deferred = append(w.deferred, orderCheck{key, seq, at, time.Now(), unsettled})
		default:
			w.violateLocked("aggregate %s: #%d (partition %d offset %d) handled before #%d was handled, skipped or dead-lettered%s", key, seq, at.p, at.o, unsettled[0], w.missedLocked(key, unsettled[0]))
		}
		if w.gap[ks] && at.p >= 0 {
			// A copy of a message the ingest reported not published.
			if w.ing != nil {
				w.ing.strayHandled++
			}
			if m, ok := w.maxHandled[key]; ok && m > seq {
				w.violateLocked("aggregate %s: #%d, which the ingest reported not published, handled from its copy at partition %d offset %d after #%d was handled", key, seq, at.p, at.o, m)
			}
		}
		w.firstHandled[ks] = true
		if m, ok := w.maxHandled[key]; !ok || seq > m {
			w.maxHandled[key] = seq
		}
	}
	w.handled[at]++
	w.settleLocked(at, key, seq)
	w.mu.Unlock()
}

// skipped records a message the handler skips, before its acknowledgement,
// in the try begun at called of the ownership inc (see succeeded).
func (w *world) skipped(at pos, key string, seq int, called time.Time, inc *incarnation) {
	w.mu.Lock()
	if time.Since(called) >= triedLate {
		w.tryFailedLocked(at, called)
	}
	w.finishedInLocked(inc, at, called)
	w.settleLocked(at, key, seq)
	w.mu.Unlock()
}

// localRecord is a record admitted to a member's receiver through Admit.
type localRecord struct {
	at     pos
	member int
	a      receiver.Admitted
}

// --- the broker ------------------------------------------------------------

// suspect is a commit past offsets the simulation did not know when the
// broker received it.
type suspect struct {
	p       int32
	offsets []int64 // unfinished and unknown then
	desc    string
}

// commitPastLocked judges a commit of partition p at offset, above the
// partition's finished prefix. An unfinished record the simulation knows
// of is a violation now. A record it does not know of yet may be a copy
// the ingest published marked as handled here, which a member skips and
// commits past as soon as it reads it, possibly before the ingest's
// answer told the simulation where it went: such offsets are kept
// (suspects) and must each turn out to be a marked copy by the end of the
// run (checkSuspectsLocked).
func (w *world) commitPastLocked(p int32, offset int64, member string) {
	var unknown []int64
	for o := w.prefix[p]; o < offset; o++ {
		at := pos{p, o}
		if w.finished[at] {
			continue
		}
		_, poison := w.poi.recs[at]
		if _, known := w.keyOf[at]; known || poison {
			w.violateLocked("commit of partition %d at offset %d, but offset %d had not finished (member %s): %s",
				p, offset, o, member, w.historyLocked(at))
			return
		}
		if len(unknown) == 100 {
			w.violateLocked("commit of partition %d at offset %d, but offsets from %d had not finished, over 100 of them not known yet (member %s)",
				p, offset, w.prefix[p], member)
			return
		}
		unknown = append(unknown, o)
	}
	w.suspects = append(w.suspects, suspect{p, unknown, fmt.Sprintf("%.3fs commit of partition %d at offset %d by member %s",
		float64(time.Since(start))/1e9, p, offset, member)})
}

// checkSuspectsLocked checks that every offset a commit passed before the
// simulation knew of it is a copy published marked.
func (w *world) checkSuspectsLocked() {
	for _, s := range w.suspects {
		for _, o := range s.offsets {
			if !w.markedCopy[pos{s.p, o}] {
				w.violateLocked("%s, but offset %d had not finished, and it is no copy published marked: %s", s.desc, o, w.historyLocked(pos{s.p, o}))
				break
			}
		}
	}
}

// watchCommits checks every commit the broker receives against what
// finished, and fails a share of them while commit faults are on.
func (w *world) watchCommits() {
	w.c.ControlKey(int16(kmsg.OffsetCommit), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		w.c.KeepControl()
		req := kr.(*kmsg.OffsetCommitRequest)
		w.mu.Lock()
		for _, t := range req.Topics {
			if t.Topic != topic && t.TopicID != w.topicID {
				continue
			}
			for _, p := range t.Partitions {
				w.commitLog[p.Partition] = append(w.commitLog[p.Partition], fmt.Sprintf("%.3fs %s gen %d: %d",
					float64(time.Since(start))/1e9, req.MemberID[:5], req.Generation, p.Offset))
				if w.commitsBy[req.MemberID] == nil {
					w.commitsBy[req.MemberID] = map[int32]int64{}
				}
				w.commitsBy[req.MemberID][p.Partition] = max(w.commitsBy[req.MemberID][p.Partition], p.Offset)
				if p.Offset > w.prefix[p.Partition] {
					w.commitPastLocked(p.Partition, p.Offset, req.MemberID)
				}
			}
		}
		// A failed commit is not applied: the member's last commit, from
		// which its incarnation's uncommitted records count, stays.
		fail := w.commitFail > 0 && w.crng.Float64() < w.commitFail
		// Stalled commits are processed in the order received, as a
		// coordinator appends commits to its log, also across connections:
		// a commit from a connection the member has given up on never lands
		// after the one it sent next. So a commit received while earlier
		// ones still wait, waits for them.
		var stall time.Duration
		if now := time.Now(); now.Before(w.commitStall) || now.Before(w.lastWake) {
			wake := w.commitStall
			if !w.lastWake.Before(wake) {
				wake = w.lastWake.Add(time.Millisecond)
			}
			w.lastWake = wake
			stall = wake.Sub(now)
		}
		w.mu.Unlock()
		if stall > 0 {
			// The answer waits, and so does every later request on the
			// member's connection to the coordinator (its heartbeats, its
			// next commits, its leave): the member times the commit out
			// (commitTimeout) while the broker may still apply it later.
			w.c.SleepControl(func() {
				select {
				case <-time.After(stall):
				case <-w.over:
				}
			})
		}
		if !fail {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		resp.Version = req.Version
		for _, t := range req.Topics {
			rt := kmsg.NewOffsetCommitResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetCommitResponseTopicPartition()
				rp.Partition = p.Partition
				rp.ErrorCode = kerr.UnknownServerError.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
}

// watchProduces makes the brokers answer no write to the dead-letter,
// parked or state topic until w.produceStall: each waits until then, and
// every later request on its connection behind it, as behind a broker
// that stopped answering for a while.
func (w *world) watchProduces() {
	w.c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		w.c.KeepControl()
		req := kr.(*kmsg.ProduceRequest)
		ours := false
		for _, t := range req.Topics {
			ours = ours || t.Topic == dlqTopic || t.Topic == parkedTopic || t.Topic == stateTopic
		}
		w.mu.Lock()
		stall := time.Until(w.produceStall)
		w.mu.Unlock()
		if ours && stall > 0 {
			w.c.SleepControl(func() {
				select {
				case <-time.After(stall):
				case <-w.over:
				}
			})
		}
		// Dead-letter writes refused (scheduled, or doomed for good):
		// counted per source record (promises_test.go).
		w.judgeDeadLetterWrite(kr)
		return nil, nil, false
	})
}

// stalling reports whether commits stall now, or some stalled earlier still
// wait for their answer.
func (w *world) stalling() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	return now.Before(w.commitStall) || now.Before(w.lastWake)
}

// deadLetterHook marks the source of every dead letter the broker
// acknowledged, just before the producing receiver (of member) hears of
// it; and counts the refusals of the receiver's dead-letter writes.
type deadLetterHook struct {
	w      *world
	member int
}

func (h deadLetterHook) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	if errors.Is(err, kgo.ErrMaxBuffered) {
		h.w.mu.Lock()
		h.w.fullBuffer++
		h.w.mu.Unlock()
		return
	}
	if r.Topic != dlqTopic && r.Topic != parkedTopic {
		return
	}
	// A dead letter of a parked message (skip, discard) carries the parking
	// headers instead of the dead-letter ones.
	var at pos
	receiverDL := false
	for _, hd := range r.Headers {
		switch hd.Key {
		case receiver.HeaderSourcePartition, park.HeaderSourcePartition:
			p, _ := strconv.Atoi(string(hd.Value))
			at.p = int32(p)
		case receiver.HeaderSourceOffset, park.HeaderSourceOffset:
			at.o, _ = strconv.ParseInt(string(hd.Value), 10, 64)
		}
		receiverDL = receiverDL || hd.Key == receiver.HeaderSourceOffset
	}
	if err != nil {
		if receiverDL && r.Topic == dlqTopic {
			h.w.mu.Lock()
			h.w.deadLetterRefusedLocked(r, at, err)
			h.w.mu.Unlock()
		}
		return
	}
	key, seq, ok := parseValue(r.Value)
	h.w.mu.Lock()
	h.w.acknowledgedLocked(h.member, r, at)
	if h.w.poisonAckedLocked(r, at) {
		h.w.mu.Unlock()
		return
	}
	if !ok { // a stub, written without its value (too large for the topic), or a poison record's not registered yet
		ks, known := h.w.keyOf[at]
		key, seq = ks.key, ks.seq
		if isStub(r) {
			h.w.stubs++
		}
		if !known && r.Topic != parkedTopic {
			// Its record is not registered yet: finished (committable)
			// now, settled once it is named.
			h.w.deadLetter[at]++
			h.w.finishLocked(at)
			h.w.stubAt[at] = time.Now()
			h.w.stubPending[at] = true
			h.w.unresolvedStubs++
			h.w.mu.Unlock()
			return
		}
	}
	if r.Topic == parkedTopic {
		h.w.parked[at]++
		h.w.finishLocked(at) // committable; settled only by a redrive, skip or discard
	} else {
		h.w.deadLetter[at]++
		h.w.settleLocked(at, key, seq)
		if at.p >= 0 && seq >= h.w.nextFirst[key] {
			h.w.nextFirst[key] = seq + 1 // discarded before any try
		}
	}
	h.w.mu.Unlock()
}

// --- the network -----------------------------------------------------------

// memberNet is one member's view of the in-memory network: it can be cut
// off (every connection closed, every dial refused) and healed.
type memberNet struct {
	vn *kfake.VirtualNetwork

	mu    sync.Mutex // guards cut, cutAt, healed, heals and conns
	cut   bool
	cutAt time.Time // when the current cut began
	// healed is closed when the current cut ends: a dial waiting in it
	// goes through then, as a retransmitted connection attempt would.
	healed chan struct{}
	heals  []time.Time // when each cut ended
	conns  []net.Conn
}

var errCut = errors.New("network cut")

// cutDialTimeout bounds a dial into a cut network whose context has no
// deadline (kgo's dials have one: kgo.DialTimeout, 10 s by default).
const cutDialTimeout = 10 * time.Second

// dialTimeout is the error of a dial into a cut network: a timeout, as a
// real network that drops packets gives.
type dialTimeout struct{}

func (dialTimeout) Error() string   { return "dial: i/o timeout (network cut)" }
func (dialTimeout) Timeout() bool   { return true }
func (dialTimeout) Temporary() bool { return true }
func (dialTimeout) Unwrap() error   { return errCut }

func (n *memberNet) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	n.mu.Lock()
	cut, healed := n.cut, n.healed
	n.mu.Unlock()
	if cut {
		// A cut network drops the connection attempt: the dial hangs until
		// it times out. (Refusing at once would make kgo's producer retry
		// its producer ID in a loop that never sleeps — franz-go backs off
		// on a produce response, not on a failed InitProducerID — and in
		// the virtual clock that loop stops time.)
		// A dial still waiting when the cut ends goes through: waiting
		// out its timeout instead would leave kgo's metadata loop behind
		// it, and franz-go's fetch loop, given leader hints (KIP-951) it
		// applies only after a metadata update, spins meanwhile, which in
		// the virtual clock stops time for good.
		t := time.NewTimer(cutDialTimeout)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return nil, &net.OpError{Op: "dial", Net: network, Err: dialTimeout{}}
		case <-t.C:
			return nil, &net.OpError{Op: "dial", Net: network, Err: dialTimeout{}}
		case <-healed:
		}
	}
	c, err := n.vn.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cut {
		c.Close()
		return nil, errCut
	}
	n.conns = append(n.conns, c)
	return c, nil
}

func (n *memberNet) setCut(cut bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case cut && !n.cut:
		n.cutAt = time.Now()
		n.healed = make(chan struct{})
	case !cut && n.cut:
		close(n.healed)
		n.heals = append(n.heals, time.Now())
	}
	n.cut = cut
	if cut {
		for _, c := range n.conns {
			c.Close()
		}
		n.conns = nil
	}
}

func (n *memberNet) isCut() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cut
}

// healTimes returns when the member's cuts ended.
func (n *memberNet) healTimes() []time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.heals)
}

// cutSince reports whether the member was cut off at any time after t.
func (n *memberNet) cutSince(t time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cut || slices.ContainsFunc(n.heals, func(h time.Time) bool { return h.After(t) })
}

// cutFor returns how long the member has been cut off, 0 if it is not.
func (n *memberNet) cutFor() time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.cut {
		return 0
	}
	return time.Since(n.cutAt)
}

// --- the handler -----------------------------------------------------------

// behaviour is what the handler does with one try of a message.
type behaviour uint8

const (
	ackSync       behaviour = iota // handled, acknowledged in Handle
	ackAsync                       // handled, acknowledged later from another goroutine
	ackTwice                       // acknowledged, then acknowledged again (in half the cases, by two goroutines at once)
	ackStale                       // acknowledged, then the Ack of an earlier message called again
	failOnce                       // a transient error on the first try
	failPermanent                  // a permanent error
	skipIt                         // Skip
	panicOnce                      // a panic on the first try
	hangOnce                       // the first try hangs past the handler's deadline, then acknowledges
	untilCancel                    // waits for its context's end (a revoke, its deadline) or a while
	slow                           // handled, acknowledged after a long while
)

var behaviourNames = [...]string{"sync", "async", "twice", "stale", "fail-once", "permanent", "skip", "panic-once",
	"hang-once", "until-cancel", "slow"}

// mix is splitmix64 over the words: the handler's choices depend on the
// seed and the message's position and try only.
func mix(words ...uint64) uint64 {
	var h uint64 = 0x9e3779b97f4a7c15
	for _, w := range words {
		h ^= w
		h += 0x9e3779b97f4a7c15
		h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9
		h = (h ^ (h >> 27)) * 0x94d049bb133111eb
		h ^= h >> 31
	}
	return h
}

func choose(seed uint64, at pos, attempt int) (behaviour, time.Duration) {
	h := mix(seed, uint64(at.p), uint64(at.o), uint64(attempt))
	d := time.Duration(1+(h>>20)%40) * time.Millisecond
	switch r := h % 1000; {
	case r < 560:
		return ackSync, 0
	case r < 720:
		return ackAsync, d
	case r < 760:
		return ackTwice, 0
	case r < 800:
		return ackStale, d
	case r < 840:
		if attempt == 1 {
			return failOnce, 0
		}
	case r < 860:
		return failPermanent, 0
	case r < 885:
		return skipIt, 0
	case r < 895:
		if attempt == 1 {
			return panicOnce, 0
		}
	case r < 905:
		if attempt == 1 {
			return hangOnce, handlerTimeout + d*10
		}
	case r < 930:
		if attempt == 1 {
			return untilCancel, 100 * d // up to twice the deadline: the deadline must end the try's context
		}
		return untilCancel, 50 * d
	default:
		return slow, 5 * d
	}
	return ackSync, 0
}

// simHandler is one member's handler.
type simHandler struct {
	w      *world
	member int
}

// delivered records a try of m handed to member's handler: its position,
// key, sequence number within the key and attempt number, and the member's
// ownership of the partition it came in (nil: none known, or a local
// record); and checks that it is the record produced there, that first
// deliveries follow each aggregate's order, and that within one ownership
// an aggregate's deliveries never go back.
func (w *world) delivered(ctx context.Context, member int, m *handler.Message) (at pos, key string, seq, attempt int, inc *incarnation) {
	at = pos{m.Partition, m.Offset}
	key, seq, ok := parseValue(m.Value)
	if !ok || key != string(m.Key) {
		w.violate("member %d got a record it cannot read at %v: key %q value %q", member, at, m.Key, m.Value)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if pr, poison := w.poi.recs[at]; poison && at.p >= 0 {
		w.violateLocked("member %d got the %s at %v: no handler may get a record it cannot route", member, pr, at)
	}
	if ks, known := w.keyOf[at]; known && at.p >= 0 && ks != (keySeq{key, seq}) {
		w.violateLocked("member %d got %s #%d at %v, where %s #%d was produced", member, key, seq, at, ks.key, ks.seq)
	}
	if ctx.Err() == nil {
		// A try whose context ended already is one of an incarnation the
		// receiver closed (closePartition ends its tries' contexts before
		// the partition's next assignment is logged), handed over as it
		// closed: the member's ownership of the partition it belongs to
		// is over.
		inc = w.incarnationLocked(member, at.p)
	}
	w.deliveredInLocked(member, inc, at, key, seq)
	if at.p < 0 {
		// A local record (the ingest's): no position in Kafka; the world
		// gave it one of its own when it was sent.
		l, found := w.localAt[keySeq{key, seq}]
		if !found {
			w.violateLocked("member %d got a local record the ingest never sent: key %q value %q", member, m.Key, m.Value)
		}
		at = l
	}
	w.attempts[at]++
	w.deliveredTo[at] = append(w.deliveredTo[at], member)
	next := w.nextFirst[key]
	for w.gap[keySeq{key, next}] {
		next++ // given up by the ingest before any try: never delivered
	}
	switch {
	case seq == next:
		w.nextFirst[key] = seq + 1
	case seq > next:
		w.violateLocked("aggregate %s: first delivery of #%d (partition %d offset %d) to member %d before #%d%s", key, seq, at.p, at.o, member, next, w.missedLocked(key, next))
		w.nextFirst[key] = seq + 1
	}
	return at, key, seq, w.attempts[at], inc
}

func (h *simHandler) Handle(ctx context.Context, m *handler.Message, ack handler.Ack) {
	w := h.w
	at, key, seq, attempt, inc := w.delivered(ctx, h.member, m)
	w.mu.Lock()
	stale := w.stale
	w.mu.Unlock()

	called := time.Now()
	if t, ok := w.tryStart.Load(ctx); ok {
		called = t.(time.Time) // an attempt of handler.WithRetry: its try began then
	}
	b, d := choose(w.seed, at, attempt)
	switch b {
	case failOnce, failPermanent, panicOnce, hangOnce, untilCancel:
		// A failure of the handler's choice (or a try that waits past its
		// deadline, or for its context's end): the receiver may
		// dead-letter the record after it.
		w.tryFailed(at, called)
	}
	switch b {
	case ackSync:
		w.succeeded(at, key, seq, called, inc)
		ack.Done(nil)
		w.used(ack)
	case ackAsync, slow:
		w.bg.Go(func() {
			time.Sleep(d)
			w.succeeded(at, key, seq, called, inc)
			ack.Done(nil)
			w.used(ack)
		})
	case ackTwice:
		w.succeeded(at, key, seq, called, inc)
		if d/time.Millisecond%2 == 0 {
			// From two goroutines released together: the two calls
			// race for the try, and exactly one may conclude it.
			start := make(chan struct{})
			for range 2 {
				w.bg.Go(func() {
					<-start
					ack.Done(nil)
				})
			}
			close(start)
			break
		}
		defer ack.Done(nil)
		ack.Done(nil)
	case ackStale:
		w.bg.Go(func() {
			time.Sleep(d)
			w.succeeded(at, key, seq, called, inc)
			ack.Done(nil)
			stale.Done(nil) // an Ack used before: its job may carry another record by now
			w.used(ack)
		})
	case failOnce:
		w.bg.Go(func() { ack.Done(handler.Classed(handler.Transient, errors.New("sim: 503"))) })
	case failPermanent:
		ack.Done(handler.Classed(handler.Permanent, errors.New("sim: 422")))
	case skipIt:
		w.skipped(at, key, seq, called, inc)
		ack.Done(handler.Classed(handler.Skip, errors.New("sim: not wanted")))
	case panicOnce:
		panic(fmt.Sprintf("sim: panic at %v", at))
	case hangOnce:
		w.bg.Go(func() {
			time.Sleep(d) // past the deadline: this acknowledgement is ignored
			w.succeeded(at, key, seq, called, inc)
			ack.Done(nil)
		})
	case untilCancel:
		w.bg.Go(func() {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-ctx.Done():
				ack.Done(ctx.Err())
			case <-t.C:
				// The deadline watcher checks every tenth of the timeout:
				// by then the try's context must have ended.
				if late := time.Since(called); late > handlerTimeout+handlerTimeout/10+50*time.Millisecond {
					w.violate("member %d: the try of %v ran %v, past its deadline (%v), and its context did not end", h.member, at, late, handlerTimeout)
				}
				w.succeeded(at, key, seq, called, inc)
				ack.Done(nil)
			}
		})
	}
}

// value is the value of key's record seq: key/seq, and /padding when the
// run pads values; in the version-check mode, a Wow event stream of
// aggregate key at version seq+1 whose id is key/seq (ingestBody), padded
// inside its body.
func (w *world) value(key string, seq int) []byte {
	if w.versionCheck {
		return ingestBody(key, seq, w.pad)
	}
	v := key + "/" + strconv.Itoa(seq)
	if w.pad > 0 {
		v += "/" + strings.Repeat("p", w.pad)
	}
	return []byte(v)
}

func parseValue(v []byte) (key string, seq int, ok bool) {
	if len(v) > 0 && v[0] == '{' {
		// An ingested message (a Wow event stream): key/seq is its id.
		var m struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(v, &m) != nil {
			return "", 0, false
		}
		v = []byte(m.ID)
	}
	k, s, found := strings.Cut(string(v), "/")
	s, _, _ = strings.Cut(s, "/") // the padding, if any
	n, err := strconv.Atoi(s)
	return k, n, found && err == nil
}

// summary of the behaviours chosen for the first tries of a run's records,
// for the report.
func (w *world) behaviourMix() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	counts := make([]int, len(behaviourNames))
	for p := range w.parts {
		for o := range w.ends[p] {
			b, _ := choose(w.seed, pos{p, o}, 1)
			counts[b]++
		}
	}
	var parts []string
	for i, n := range counts {
		parts = append(parts, fmt.Sprintf("%s %d", behaviourNames[i], n))
	}
	return strings.Join(parts, ", ")
}

func sortedKeys[K ~string | ~int32, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// registeredLocked is called once the position at is registered (keyOf):
// a stub dead letter already written for it is settled now.
func (w *world) registeredLocked(at pos) {
	if !w.stubPending[at] {
		return
	}
	delete(w.stubPending, at)
	ks := w.keyOf[at]
	w.unresolvedStubs--
	w.settleLocked(at, ks.key, ks.seq)
	if at.p >= 0 && ks.seq >= w.nextFirst[ks.key] {
		w.nextFirst[ks.key] = ks.seq + 1
	}
}

// orderCheck is a first success of key's message seq, at at, handled at
// when, that found the earlier messages unsettled unsettled while a stub
// could not be named yet.
type orderCheck struct {
	key       string
	seq       int
	at        pos
	when      time.Time
	unsettled []int
}

// checkDeferredLocked decides the deferred order checks, every position
// known: each earlier message unsettled then must have been a stub written
// by then.
func (w *world) checkDeferredLocked() {
	for _, c := range w.deferred {
		for _, s := range c.unsettled {
			at, ok := w.msgAt[keySeq{c.key, s}]
			if !ok && s < len(w.produced[c.key]) {
				at, ok = w.produced[c.key][s], true
			}
			if t, stub := w.stubAt[at]; ok && stub && !t.After(c.when) {
				continue
			}
			w.violateLocked("aggregate %s: #%d (partition %d offset %d) handled before #%d was handled, skipped or dead-lettered%s", c.key, c.seq, c.at.p, c.at.o, s, w.missedLocked(c.key, s))
			break
		}
	}
	if w.unresolvedStubs != 0 {
		w.violateLocked("%d stub dead letters or dead-letter writes given up, of positions never produced", w.unresolvedStubs)
	}
}

// keySeq is a record's key and its sequence number within the key.
type keySeq struct {
	key string
	seq int
}

// givenUp records a record whose dead-letter write was refused until the
// receiver of member gave up on it, committing past it (documented: it
// stays in its source topic): done for good, in the order checks too, once
// its writes were refused as often as the receiver tries them
// (checkGivenUpLocked).
func (w *world) givenUp(member int, at pos) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.checkGivenUpLocked(member, at)
	w.poi.givenUp[at] = true // a poison record's, if it is one
	if w.poisonGivenUpLocked(at) {
		return
	}
	ks, ok := w.keyOf[at]
	if !ok {
		// Not registered yet, as for a stub (see stubAt): named once it is;
		// checkDeferredLocked reports it if it never is.
		w.finishLocked(at)
		if !w.stubPending[at] {
			w.stubAt[at] = time.Now()
			w.stubPending[at] = true
			w.unresolvedStubs++
		}
		return
	}
	w.settleLocked(at, ks.key, ks.seq) // no duplicates follow from it: not an allowance
}

// logWatch watches a member's log for what its receiver reports only
// there: a record given up after its dead-letter write was refused (an
// error naming it), and what allows records to be handled again: an
// incarnation let go with records above its last commit (debug, naming the
// offsets), partitions lost (or taken again under a new member ID, which
// lets them go as lost), a partition the client rewound (from the last
// offset read back to where it delivers again), and a redrive of a parked
// aggregate cut short or failing to read its parked messages; and what
// the version check did (version_test.go). The member's counters
// cross-check the losses, rewinds and version duplicates and gaps (see
// member.crossCheckLog), so that a reworded message cannot silently turn
// duplicates into violations, allowances into none, or leave the version
// checks unchecked.
type logWatch struct {
	w *world
	m *member
}

const (
	givenUpMessage  = "dead-letter write refused; giving up"
	closedMessage   = "partition let go with records above its last commit"
	lostMessage     = "partitions lost"
	retakenMessage  = "the group coordinator had dropped this member, and the Kafka client kept partitions"
	rewoundMessage  = "the Kafka client rewound the partition"
	cutShortMessage = "parked aggregate: action cut short"
	readFailMessage = "parked aggregate: reading its parked messages"

	// The version check's (version_test.go): a message skipped as a
	// duplicate (debug), an aggregate parked at a gap, and, counted only,
	// a local record given up at a gap and a gap handled anyway.
	duplicateMessage = "event stream version already handled; skipped as a duplicate"
	gapParkMessage   = "event stream version gap: parking the aggregate at it"
	gapLocalMessage  = "event stream version gap in a local record; given up here"
	gapAnywayMessage = "event stream version gap: handled anyway"
	// A gap behind the head a redrive was asked for parks the aggregate
	// again at it: judged as a park at a gap.
	gapRedriveMessage = "event stream version gap in a redrive: the aggregate stays parked at it"

	// Counted only, for the run's summary: that the faults and actions
	// reached the paths they are there for.
	maxParkedMessage = "max-parked reached"
	tooLargeMessage  = "parked copy too large for the parked topic"
	byHandMessage    = "aggregate parked by hand"
	// kgo revoked, at the start of a session under a new member ID, what
	// the dropped membership still held, and the receiver let it go as
	// lost (its onLost logs lostMessage for the partitions, judged so).
	droppedMessage = "the group coordinator had dropped this member: partitions it still held are let go as lost"

	// A member's ownerships of partitions (promises_test.go): assigned,
	// revoked once committed and let go, and a revoke's drain that ran out
	// of time (its unfinished records dropped).
	assignedMessage = "partitions assigned"
	revokedMessage  = "partitions revoked"
	drainCutMessage = "revoke deadline passed"
)

var watchedMessages = []string{givenUpMessage, closedMessage, lostMessage, retakenMessage, droppedMessage, rewoundMessage, cutShortMessage, readFailMessage,
	maxParkedMessage, tooLargeMessage, byHandMessage, duplicateMessage, gapParkMessage, gapLocalMessage, gapAnywayMessage, gapRedriveMessage,
	assignedMessage, revokedMessage, drainCutMessage}

func (c logWatch) Enabled(zapcore.Level) bool        { return true }
func (c logWatch) With([]zapcore.Field) zapcore.Core { return c }
func (c logWatch) Sync() error                       { return nil }
func (c logWatch) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	for _, m := range watchedMessages {
		if strings.HasPrefix(e.Message, m) {
			return ce.AddCore(e, c)
		}
	}
	return ce
}

func (c logWatch) Write(e zapcore.Entry, fields []zapcore.Field) error {
	var (
		topicName, aggregate string
		partition            = int32(-2)
		offset, from, to     = int64(-1), int64(-1), int64(-1)
		again                = int64(-1) // a rewind's delivering_from
		version, last        = int64(-1), int64(-1)
		parts                map[string][]int32
	)
	for _, f := range fields {
		switch f.Key {
		case "topic":
			topicName = f.String
		case "aggregate":
			aggregate = f.String
		case "partition":
			partition = int32(f.Integer)
		case "offset":
			offset = f.Integer
		case "from":
			from = f.Integer
		case "to":
			to = f.Integer
		case "delivering_from":
			again = f.Integer
		case "version":
			version = f.Integer
		case "last_handled":
			last = f.Integer
		case "partitions":
			parts, _ = f.Interface.(map[string][]int32)
		}
	}
	w := c.w
	switch {
	case strings.HasPrefix(e.Message, givenUpMessage):
		w.givenUp(c.m.id, pos{partition, offset})
	case strings.HasPrefix(e.Message, assignedMessage):
		w.mu.Lock()
		defer w.mu.Unlock()
		w.assignedLocked(c.m.id, parts[topic])
	case strings.HasPrefix(e.Message, revokedMessage):
		lastOK := c.m.wire.lastCommitOK()
		w.mu.Lock()
		defer w.mu.Unlock()
		w.revokedLocked(c.m, parts[topic], lastOK)
	case strings.HasPrefix(e.Message, drainCutMessage):
		w.mu.Lock()
		defer w.mu.Unlock()
		w.pr.drainCut[c.m.id] = time.Now()
	case strings.HasPrefix(e.Message, closedMessage):
		w.mu.Lock()
		defer w.mu.Unlock()
		if topicName != topic || from < 0 || to < from {
			w.violateLocked("member %d: a partition let go with records above its last commit that the simulation cannot read: topic %q partition %d from %d to %d", c.m.id, topicName, partition, from, to)
			return nil
		}
		w.uncommitted[partition] = append(w.uncommitted[partition], span{from, to})
	case strings.HasPrefix(e.Message, droppedMessage):
		w.mu.Lock()
		defer w.mu.Unlock()
		w.seen.droppedRevoke++
	case strings.HasPrefix(e.Message, lostMessage), strings.HasPrefix(e.Message, retakenMessage):
		w.mu.Lock()
		defer w.mu.Unlock()
		if strings.HasPrefix(e.Message, retakenMessage) {
			w.seen.retaken++
		}
		w.endedLocked(c.m.id, parts[topic])
		for _, p := range parts[topic] {
			w.lostParts[p]++
			c.m.lostLogged++
		}
	case strings.HasPrefix(e.Message, rewoundMessage):
		w.mu.Lock()
		defer w.mu.Unlock()
		c.m.rewindsLogged++
		if topicName != topic || again < 0 || from < again {
			w.violateLocked("member %d: a rewind the simulation cannot read: topic %q partition %d from %d delivering again from %d", c.m.id, topicName, partition, from, again)
			return nil
		}
		w.rewound[partition] = append(w.rewound[partition], span{again, from})
		if inc := w.incarnationLocked(c.m.id, partition); inc != nil {
			inc.tainted = true // a new incarnation begins, unlogged
		}
	case strings.HasPrefix(e.Message, maxParkedMessage):
		w.mu.Lock()
		defer w.mu.Unlock()
		w.seen.maxParked++
	case strings.HasPrefix(e.Message, tooLargeMessage):
		w.mu.Lock()
		defer w.mu.Unlock()
		w.seen.tooLarge++
	case strings.HasPrefix(e.Message, byHandMessage):
		w.mu.Lock()
		defer w.mu.Unlock()
		w.seen.byHand++
	case strings.HasPrefix(e.Message, duplicateMessage):
		w.versionDuplicate(c.m, topicName, pos{partition, offset}, aggregate, version, last)
	case strings.HasPrefix(e.Message, gapParkMessage), strings.HasPrefix(e.Message, gapRedriveMessage):
		w.gapParked(c.m, topicName, pos{partition, offset}, aggregate, version, last, strings.HasPrefix(e.Message, gapRedriveMessage))
	case strings.HasPrefix(e.Message, gapLocalMessage):
		w.mu.Lock()
		defer w.mu.Unlock()
		w.ver.localGaps++
		c.m.gapsLogged++
	case strings.HasPrefix(e.Message, gapAnywayMessage):
		w.mu.Lock()
		defer w.mu.Unlock()
		w.ver.handledAnyway++
		c.m.gapsLogged++
		if w.park && !w.parkedAtLocked(aggregate, version) {
			// With on-gap park, a gap is handed over only as the head a
			// redrive was asked for: the aggregate parked at it first.
			w.violateLocked("member %d handed %s version %d (partition %d offset %d) to the handler past a version gap (last handled %d) without parking at it first",
				c.m.id, aggregate, version, partition, offset, last)
		}
	default: // a redrive cut short, or failing to read
		w.mu.Lock()
		defer w.mu.Unlock()
		w.cutShort[aggregate]++
	}
	return nil
}

// missedLocked describes record #seq of key, passed over by a later one:
// where it is, what became of it, and the partition's last commits.
func (w *world) missedLocked(key string, seq int) string {
	at, found := w.msgAt[keySeq{key, seq}]
	if !found {
		ps := w.produced[key]
		if seq >= len(ps) {
			return ""
		}
		at = ps[seq]
	}
	if w.gap[keySeq{key, seq}] {
		return fmt.Sprintf(" (given up by the ingest; local record %v: %s)", w.localAt[keySeq{key, seq}], w.historyLocked(w.localAt[keySeq{key, seq}]))
	}
	log := w.commitLog[at.p][max(0, len(w.commitLog[at.p])-12):]
	return fmt.Sprintf(" (partition %d offset %d: %s; last commits of the partition: %s)",
		at.p, at.o, w.historyLocked(at), strings.Join(log, ", "))
}

// historyLocked describes what happened to the record at so far.
func (w *world) historyLocked(at pos) string {
	var tries []string
	for a := 1; a <= w.attempts[at]; a++ {
		b, _ := choose(w.seed, at, a)
		tries = append(tries, behaviourNames[b])
	}
	if w.sink != nil {
		tries = tries[:0] // a try's behaviour is chosen per request at the sink
	}
	return fmt.Sprintf("tries [%s] by members %v, handled %d, dead letters %d, parked copies %d%s", strings.Join(tries, " "), w.deliveredTo[at], w.handled[at], w.deadLetter[at], w.parked[at], w.sinkServedLocked(at))
}
