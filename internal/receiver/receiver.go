// Package receiver consumes the topics of one bounded context for one
// dispatcher: one franz-go client, one consumer group. It keeps a window of
// unfinished messages, feeds each record to the mailbox of its aggregate ID on
// the shared executor, and commits per partition the offset after the
// longest prefix of finished records (at-least-once).
//
// # Window
//
// At most MaxInFlight records are unfinished (queued in a mailbox or
// running). When the window is full the receiver pauses its topics and stops
// polling; it polls again once at least a sixteenth of the window is free,
// asking for no more records than are free. The client's prefetch is
// bounded by its fetch options, so memory is bounded by configuration, not
// by lag.
//
// Two limits keep one partition from holding up the others. A partition
// whose uncommitted span (records read since its committed offset) exceeds
// four windows, which happens when one record is stuck while later ones
// finish, is paused on its own until the span halves. And while more than
// one partition is assigned, no partition holds more than half of the
// window: polls are sized so that one poll cannot take a partition past that
// by more than a sixteenth of the window, and a partition that reaches it is
// paused until half of its records finished. So a stuck aggregate whose
// backlog piles up behind it pauses its partition, and the other partitions
// keep the other half. Each such pause belongs to its partition's
// incarnation: it is lifted, exactly once, when the incarnation ends.
//
// # Attempts and deadlines
//
// Every handler attempt carries a token (see job): an acknowledgement counts
// only for the attempt it was given to, and only the first time. With a
// HandlerTimeout, the deadline watcher looks at the records in a handler
// every tenth of it: an attempt not acknowledged in time counts as a
// transient failure, and its late acknowledgement is ignored. A panic in a
// handler's Handle is recovered: the message fails permanently, with class
// panic.
//
// # Rebalances
//
// Each assignment of a partition starts a new incarnation with its own
// tracker and context. On revoke the receiver waits (up to RevokeTimeout) for
// the partition's unfinished records, commits its watermark synchronously and
// only then lets the partition go; records still unfinished at the deadline
// are dropped (their handler contexts canceled) and redelivered to the next
// owner. On loss nothing is committed. Completions of an old incarnation are
// ignored. Readiness follows the membership: a receiver is ready from its
// first assignment until its membership is lost, and again from the next
// assignment.
//
// # Shutdown
//
// Stop stops admitting, waits for unfinished records until its deadline,
// commits every partition's finished prefix (partitions with unfinished
// records included), and only then closes the partitions and leaves the
// group.
//
// # Words
//
// Each verb below means one thing in this package:
//
//   - admit: take a record into the window: one fetched (admitPartition) or
//     one handed over by the ingest endpoint (Admit). An admitted record
//     counts in flight until it is finished or dropped.
//   - screen: decide whether the handler gets an admitted record (its
//     local-first copy, the Wow checks, the dispatcher's filters).
//   - try: one call of the handler for a record. A try is armed with a
//     token; the first Ack (or the deadline watcher) takes its outcome.
//   - conclude: act on a try's outcome: finish the record, hold it, send
//     it to the dead-letter topic, or abandon it.
//   - hold: keep a failed record and try again after a backoff, holding its
//     aggregate but no worker.
//   - finish: a record is done for good (handled, skipped, dead-lettered or
//     given up after its dead-letter write was refused): it counts toward
//     the watermark, and its mailbox moves on.
//   - drop: give up a record that is not finished (its partition went, the
//     executor is closing): it leaves the window and is delivered again
//     later. Abandon is a drop of a record whose try ran, whose mailbox
//     must also move on.
//   - release: give a slot of the window back (on finish and drop).
//   - commit: send partitions' watermarks to the group coordinator.
//
// # Goroutines and locks
//
// The receiver owns four goroutines, the poll loop, the committer, the
// deadline watcher and the watcher of local holds (watchHolds), all
// stopped by Stop. commitMu serializes commits with
// the rebalance callbacks, so offsets of a partition are never sent after
// its revoke returned; it is held across a revoke's drain and commit round
// trips, so it is a channel (see chanLock). partsMu guards the incarnation map. partition.mu
// guards a tracker and the partition's pause state: the client is told to
// pause or resume a partition only under its partition.mu. Lock order:
// commitMu → partsMu → partition.mu. localWait.mu (an admitted record's
// give-up against the ingest's report of its copy) → localHolds.mu, a leaf.
package receiver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/executor"
	"github.com/wowd/wowd/internal/memory"
	"github.com/wowd/wowd/internal/metrics"
	"github.com/wowd/wowd/internal/signal"
)

// Route tells where records of one topic go.
type Route struct {
	Context   string // bounded context name
	Aggregate string
	Kind      handler.Kind
	Group     *executor.Group // mailboxes of (dispatcher, context, aggregate)
}

// DeadLetter configures where records that failed for good go.
type DeadLetter struct {
	// Enabled writes them to Topic(source topic) and commits past them.
	// Disabled retries them forever, holding their aggregate (never the
	// worker) and the partition's commit.
	Enabled bool
	Topic   func(source string) string
}

// Options configure a receiver.
type Options struct {
	Dispatcher string
	Context    string // bounded context name
	Service    string
	GroupID    string
	Routes     map[string]Route // by topic

	MaxInFlight    int
	CommitInterval time.Duration
	RevokeTimeout  time.Duration
	// RetryBackoff bounds the wait between attempts when a dead-letter write
	// fails or dead letters are disabled: it grows from 200ms to this.
	RetryBackoff time.Duration
	// HandlerTimeout is the most time a handler attempt may take to be
	// acknowledged; after it the attempt counts as a transient failure and
	// its acknowledgement is ignored. 0 means no deadline.
	HandlerTimeout time.Duration

	Handler     handler.Handler
	HandlerType string
	DeadLetter  DeadLetter
	// Park parks the aggregate of a message that failed for good instead
	// of dead-lettering the message (see park.go); nil: dead-letter.
	Park *Parking

	// Wow decodes each record as a Wow message: checked against its key and
	// topic, filtered by Events and Commands, given to the handler decoded.
	// Records that do not decode or check go to the dead-letter path.
	Wow bool
	// WowRoutingOnly: the handler reads only the routing fields of a Wow
	// message (handler.Spec.RoutingOnly); the rest is not decoded.
	WowRoutingOnly bool
	Events         map[string]bool // event names wanted; empty: all
	// VersionCheck checks event streams' aggregate versions (version.go);
	// it needs the full decode (not WowRoutingOnly). OnGapPark parks an
	// aggregate at a gap (needs Park); a local record at a gap is given
	// up to the owner of its partition instead.
	VersionCheck, OnGapPark bool
	Commands                map[string]bool // command names wanted; empty: all

	// ClientOpts connect to Kafka: brokers, TLS, SASL, fetch limits, group
	// timeouts, start offset, balancer. The receiver adds the group, topics,
	// callbacks and commit options itself.
	ClientOpts []kgo.Opt
	// Fetch is the receiver's part of the process's memory budget: the
	// poll loop sizes the client's fetches by it (nil: no budget; the
	// fetch limits of ClientOpts are the bounds). Either way a partition's
	// fetch is held to about the records it may hold (see shareCap). The
	// receiver leaves the budget when it stops.
	Fetch *memory.Fetch

	Logger  *zap.Logger
	Metrics *metrics.Metrics // nil: no metrics
	// Tracer records a span per message (package tracing); nil: none. The
	// record's W3C trace context reaches the handler either way.
	Tracer trace.Tracer
	// Ingest: the local-first ingest endpoint may admit records here
	// (Admit; wow.ingest.enabled). Only then are the holds that keep an
	// ingested aggregate's order watched: without it the watcher asked
	// the coordinator for the group's offsets every 200 ms for as long as
	// a partition stayed quiet below its end at start, and reported every
	// ingested message held (ingest_held_all) where none could come.
	Ingest bool

	// afterClient, when set (tests), runs in New right after the client
	// is made, before its fetches are sized.
	afterClient func(*kgo.Client)
}

// Receiver is one consumer-group member feeding the executor.
type Receiver struct {
	o   Options
	log *zap.Logger
	cl  *kgo.Client
	// seek, when set (tests), replaces cl.SetOffsets where the poll loop
	// sends the client back (rewind, shedStuck).
	seek func(map[string]map[int32]kgo.EpochOffset)
	// beforeParkCheck, when set (tests), runs in a job's Run between its
	// partition's closed check and its aggregate's parked check, with the
	// job's aggregate.
	beforeParkCheck func(aggregate string)
	lease           *lease // how long the member can be sure it is in its group; parking writes stay within it
	m               *metrics.Receiver
	topics          []string
	routes          map[string]*Route // o.Routes, addressable
	groups          []*executor.Group // the groups of the routes, each once
	keyBuf          []string          // scratch of the poll loop
	// heldOrder and heldTurn: scratch and turn of admitHeld (poll loop only).
	heldOrder []*partition
	heldTurn  int
	heldBytes atomic.Int64              // keys and values of the held records (written by the poll loop)
	recBytes  int64                     // a moving average of the bytes of a record taken (the poll loop's)
	fpBuf     []kgo.FetchTopicPartition // scratch of the poll loop
	// rounds and polls count the poll loop's turns and the ones among them
	// that polled (the poll loop's only; read once it ended, by benchmarks).
	rounds, polls int64
	// fetchMax is the fetch limit last given to the client (New, then the poll loop
	// only; read by Snapshot through fetchMaxSeen).
	fetchMax, fetchPart int32
	fetchMaxSeen        atomic.Int32
	seeds               int             // the client's seed brokers (set in New)
	taskBuf             []executor.Task // scratch of the poll loop
	window              int64
	batch               int64
	spanCap             int

	epoch    time.Time // anchors since
	fails    streak    // recent handler outcomes: backs off while a sink is down
	inFlight atomic.Int64
	// pollWaits is set from when the poll loop finds less than a
	// sixteenth of the window (batch) free until it has taken the room it
	// waited for (or, holding no records, goes to wait for some in a
	// poll): the ingest's admissions take only the slots it grants them
	// meanwhile (Admit), or, each taking a slot the moment one frees, they
	// would keep the poll loop from ever polling again. The poll loop,
	// finding admissions waiting (admitWaiting), grants them up to half of
	// the room it takes (grants, leaveRoom): a backlog in Kafka and a
	// stream of ingested messages share the window rather than take turns
	// by winning races.
	pollWaits    atomic.Bool
	admitWaiting atomic.Int64  // Admit calls waiting for room
	grants       atomic.Int64  // slots admissions may take of the room the poll loop waits for
	changed      signal.Signal // notified when a record leaves the window, and when admission stops
	nparts       atomic.Int32  // partitions assigned; written under partsMu
	room         chan struct{} // poll loop wake-up: window space or a partition to resume
	paused       atomic.Bool   // topics paused in the client (by the poll loop only)
	// pausedFor is why the poll loop last paused the topics (a
	// topicPause); read only while paused.
	pausedFor atomic.Uint32
	joined    atomic.Bool              // a member of the group now: assigned since the last loss
	noTopics  atomic.Pointer[[]string] // the receiver's topics, when none existed at start (checkTopics)
	// member is the group member ID of the last assignment: a new one
	// means the coordinator dropped the member (see retake). Only kgo's
	// rebalance callbacks use it, and kgo runs them one at a time.
	member string
	// rebalancing is set from a revoke or a loss until the next assignment:
	// the group is (re)joining, and a commit would only wait for the join
	// (kgo holds commits during JoinGroup and SyncGroup) or fail.
	rebalancing atomic.Bool
	revoking    atomic.Int32 // revoke callbacks under way (waiting for commitMu or running)
	// stopExpired is canceled when Stop's context is done: revoke drains
	// and their commits end with it, so a revoke never holds Stop past
	// its deadline.
	stopExpired context.Context
	expireStop  context.CancelFunc
	// abortClient ends every request of the client (its context): Stop
	// calls it once the client's Close has run for leaveTimeout (see
	// closeClient).
	abortClient context.CancelFunc
	assignedSig chan struct{} // signaled by every assignment
	// fitted is closed once New sized the client's fetches (fitFetch):
	// onAssigned waits for it, so no partition is fetched before.
	fitted   chan struct{}
	stopping atomic.Bool // admission stopped: records polled from now on are not admitted
	closing  atomic.Bool // revokes no longer wait: Stop already drained

	panicLogged atomic.Bool // the stack of a handler panic was logged

	// dlSizes are the dead-letter topics' max.message.bytes, read at start
	// (sizeDeadLetterTopics): the client's batches to each keep to it.
	dlSizes atomic.Pointer[map[string]int32]
	// dlEnsureMu serializes the making of dead-letter topics for sources
	// that appeared after Start (ensureDeadLetterTopicsLate) and guards
	// dlEnsuredAt, when that last ran. A leaf but for the client's calls.
	dlEnsureMu  sync.Mutex
	dlEnsuredAt time.Time
	// srcMax are the consumed topics' max.message.bytes (sourceMaxBytes; its own lock).
	srcMax sourceLimits

	versions *versions    // nil without Options.VersionCheck
	park     *parkState   // nil without Options.Park
	nparked  atomic.Int32 // len(park.parked), read without its lock
	// parkSlots are max-parked slots reserved by aggregates whose parking
	// is being written (see reservePark).
	parkSlots atomic.Int32
	// parkWaiting counts the jobs waiting for a max-parked slot (see
	// waitPark): the pause lasts only while one does.
	parkWaiting atomic.Int32
	parkFull    atomic.Bool // max-parked reached and a job waits for a slot: fetching paused
	// parkFullMu guards the changes of parkFull (read without it): each is
	// decided on the counts (nparked, parkSlots, parkWaiting) read under
	// it, and every change of the counts that may call for one is followed
	// by such a decision (waitPark, parkRoom), so the last decision is made
	// on the last counts.
	parkFullMu sync.Mutex

	retireMu sync.Mutex   // guards retiring
	retiring []*partition // incarnations no longer owned (draining or closed) with records pending: the deadline watcher keeps watching them

	commitMu chanLock // serializes commits and rebalance callbacks

	partsMu sync.RWMutex // guards parts
	parts   map[tp]*partition

	// local holds the records admitted through Admit: no tracker of it is
	// committed; it closes when the receiver stops.
	local *partition

	pollCancel context.CancelFunc
	pollDone   chan struct{}
	// holding are the partitions with held records (see partition.held);
	// only the poll loop reads and writes it.
	holding []*partition
	// pollWake, while set, cancels the poll under way: the poll loop sets
	// it when it waits for records while some are held, and notify calls
	// it, so held records go in as soon as there is room for them.
	pollWake atomic.Pointer[context.CancelFunc]
	// doneCtx is canceled: a poll with it returns at once, blocking
	// rebalances until AllowRebalance (see pollLoop).
	doneCtx    context.Context
	commitStop chan struct{}
	commitDone chan struct{}
	watchStop  chan struct{} // stops the deadline watcher
	watchDone  chan struct{}
	// holds are the aggregates whose local records are given up while a
	// copy given up earlier waits for its partition's owner (localhold.go);
	// watchHolds releases them, from Start until holdStop is closed.
	holds    *localHolds
	holdStop chan struct{}
	holdDone chan struct{}
	started  bool
	stopOnce sync.Once
	stopErr  error
}

type tp struct {
	topic     string
	partition int32
}

// New builds a receiver. Its client joins the group and fetches from now
// on; records are taken from it (and handled) after Start.
func New(o Options) (*Receiver, error) {
	if len(o.Routes) == 0 {
		return nil, errors.New("receiver: no topics")
	}
	if o.MaxInFlight <= 0 {
		return nil, fmt.Errorf("receiver: max in flight %d, want at least 1", o.MaxInFlight)
	}
	if o.CommitInterval <= 0 {
		o.CommitInterval = time.Second
	}
	if o.RevokeTimeout <= 0 {
		o.RevokeTimeout = 20 * time.Second
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	r := &Receiver{
		o:           o,
		log:         o.Logger,
		window:      int64(o.MaxInFlight),
		batch:       max(1, int64(o.MaxInFlight)/16),
		spanCap:     4 * o.MaxInFlight,
		epoch:       time.Now(),
		room:        make(chan struct{}, 1),
		assignedSig: make(chan struct{}, 1),
		fitted:      make(chan struct{}),
		parts:       make(map[tp]*partition),
		local:       newLocalPartition(),
		pollDone:    make(chan struct{}),
		doneCtx:     canceledCtx,
		commitMu:    make(chanLock, 1),
		commitStop:  make(chan struct{}),
		commitDone:  make(chan struct{}),
		watchStop:   make(chan struct{}),
		watchDone:   make(chan struct{}),
		holds:       newLocalHolds(o.Ingest),
		holdStop:    make(chan struct{}),
		holdDone:    make(chan struct{}),
	}
	r.stopExpired, r.expireStop = context.WithCancel(context.Background())
	if o.VersionCheck {
		r.versions = newVersions(o.MaxInFlight)
	}
	if o.Park != nil {
		if o.Park.Max <= 0 {
			return nil, fmt.Errorf("receiver: max parked %d, want at least 1", o.Park.Max)
		}
		if err := r.newParking(); err != nil {
			return nil, err
		}
	}
	r.routes = make(map[string]*Route, len(o.Routes))
	for t, rt := range o.Routes {
		r.topics = append(r.topics, t)
		r.routes[t] = &rt
		if !slices.Contains(r.groups, rt.Group) {
			r.groups = append(r.groups, rt.Group)
		}
	}
	if o.Metrics != nil {
		r.m = o.Metrics.Receiver(o.Dispatcher, o.Context, o.HandlerType, r)
		if o.Park != nil {
			r.m.Parking()
		}
	}
	opts := append([]kgo.Opt{}, o.ClientOpts...)
	opts = append(opts,
		kgo.ConsumerGroup(o.GroupID),
		kgo.ConsumeTopics(r.topics...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		// Of a transactional producer's records, only committed ones are
		// messages: an aborted transaction's never happened.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// A transaction's end is a marker, which takes an offset of its own
		// and carries no message: kept, it is finished as it is admitted,
		// so the commit steps over it to the partition's end (otherwise a
		// caught-up group stays one short of the end, its lag 1 for good).
		kgo.KeepControlRecords(),
		kgo.OnPartitionsAssigned(r.onAssigned),
		kgo.OnPartitionsRevoked(r.onRevoked),
		kgo.OnPartitionsLost(r.onLost),
	)
	// Batches to a parked or dead-letter topic keep to its own limit,
	// which Start reads (parksize.go); to other topics, to kgo's default
	// (this replaces a ProducerBatchMaxBytes of ClientOpts).
	opts = append(opts, kgo.ProducerBatchMaxBytesFn(r.batchMaxBytes))
	if r.o.Fetch == nil {
		r.o.Fetch = memory.Unbudgeted()
	}
	r.lease = newLease()
	opts = append(opts, kgo.WithHooks(r.o.Fetch, r.lease, ownBytes{}))
	clientCtx, abortClient := context.WithCancel(context.Background())
	r.abortClient = abortClient
	opts = append(opts, kgo.WithContext(clientCtx))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		abortClient()
		if r.park != nil {
			r.park.tail.Close()
		}
		return nil, fmt.Errorf("kafka client for %s/%s: %w", o.Dispatcher, o.Context, err)
	}
	r.cl = cl
	if o.afterClient != nil {
		o.afterClient(cl)
	}
	if session, ok := cl.OptValue(kgo.SessionTimeout).(time.Duration); ok {
		// A rebalance drops a member that does not rejoin within the
		// rebalance timeout, whatever its session (see lease.go).
		if rebalance, ok := cl.OptValue(kgo.RebalanceTimeout).(time.Duration); ok && rebalance > 0 {
			r.lease.rebalance.Store(int64(rebalance))
		}
		r.lease.session.Store(int64(session))
	}
	maxBytes, ok := cl.OptValue(kgo.FetchMaxBytes).(int32)
	if !ok || maxBytes <= 0 {
		maxBytes = 50 << 20 // kgo's default
	}
	maxPart, ok := cl.OptValue(kgo.FetchMaxPartitionBytes).(int32)
	if !ok || maxPart <= 0 {
		maxPart = 1 << 20 // kgo's default
	}
	r.o.Fetch.Configure(maxBytes, maxPart)
	if seeds, ok := cl.OptValue(kgo.SeedBrokers).([]string); ok {
		r.seeds = len(seeds)
	}
	// Now, not in the poll loop: the client fetches as soon as it has
	// joined, before Start. Until this ran, its limits are the configured
	// ones: onAssigned waits for it (fitted), and kgo fetches an assigned
	// partition only after onAssigned returns.
	r.fitFetch()
	close(r.fitted)
	return r, nil
}

// startTimeout bounds what Start asks of Kafka before it consumes: creating
// the dead-letter and parking topics and reading their sizes, the producer
// ID.
const startTimeout = 10 * time.Second

// Start begins consuming. The receiver's goroutines run until Stop. What it
// first asks of Kafka (topics, the producer ID, the parked aggregates) waits
// no longer than startTimeout each, and not past ctx: a stop asked while a
// broker does not answer need not wait for them. Once ctx is done, Start
// returns soon and the receiver still runs; Stop ends it.
func (r *Receiver) Start(ctx context.Context) {
	sctx, scancel := context.WithTimeout(ctx, startTimeout)
	r.checkTopics(sctx)
	if r.o.DeadLetter.Enabled {
		// Under dlEnsureMu: a local record dead-lettered while Start runs
		// (the ingest takes records before the receivers start) may make
		// them late, at the same time.
		r.dlEnsureMu.Lock()
		r.ensureDeadLetterTopics(sctx)
		r.dlEnsureMu.Unlock()
	}
	// Dead-letter writes go from now on: those of fetched records, polled
	// below (those of parking come after ps.ready, closed by startParking).
	if r.o.DeadLetter.Enabled || r.park != nil {
		// The producer ID now, while Kafka is reachable at start, rather
		// than at the first dead-letter or parking write, which may come
		// when it is not: franz-go loads it under a lock its other
		// brokers' producers wait on.
		if _, _, err := r.cl.ProducerID(sctx); err != nil {
			r.log.Warn("initializing the Kafka producer ID (for dead-letter and parking writes); the first write tries again", zap.Error(err))
		}
	}
	scancel()
	if r.park != nil {
		r.startParking(ctx)
	}
	pctx, cancel := context.WithCancel(context.Background())
	r.pollCancel = cancel
	r.started = true
	go r.pollLoop(pctx)
	go r.commitLoop()
	go r.watchDeadlines()
	go r.watchHolds()
}

// since returns the time since the receiver was made, on the monotonic
// clock: cheaper than time.Now, which matters once per record.
func (r *Receiver) since() time.Duration { return time.Since(r.epoch) }

// Ready reports whether the receiver is a member of its consumer group:
// assigned (possibly nothing) since it last lost its membership; and, when
// it parks aggregates, has read which ones are parked (until then it
// handles nothing and gives local-first records up).
func (r *Receiver) Ready() bool {
	return r.joined.Load() && (r.park == nil || r.park.caughtUp.Load())
}

// Joined reports whether the receiver is a member of its consumer group
// (Ready asks more of one that parks).
func (r *Receiver) Joined() bool { return r.joined.Load() }

// InFlight returns the number of unfinished records.
func (r *Receiver) InFlight() int { return int(r.inFlight.Load()) }

// Stop stops admitting records, waits for unfinished ones until ctx is done,
// commits what finished, leaves the group and closes the client. Records not
// finished by then are dropped and redelivered after the next start.
func (r *Receiver) Stop(ctx context.Context) error {
	r.stopOnce.Do(func() { r.stopErr = r.stop(ctx) })
	return r.stopErr
}

// leaveTimeout bounds the client's Close in Stop, past the final commit.
// Close leaves the group, and first waits for the client's group
// management to end, which may be in a JoinGroup that the coordinator
// holds until every member has rejoined (up to the rebalance timeout) and
// that franz-go does not end when its context is canceled, only when the
// client's own context is. Past the bound the client's requests end: no
// leave is sent, and the group drops the member after its session timeout.
const leaveTimeout = 10 * time.Second

// closeClient closes the client (leaving the group) within leaveTimeout.
func (r *Receiver) closeClient() {
	abort := time.AfterFunc(leaveTimeout, r.abortClient)
	r.cl.Close()
	abort.Stop()
	r.abortClient()
}

func (r *Receiver) stop(ctx context.Context) error {
	defer context.AfterFunc(ctx, r.expireStop)() // before stopping: a revoke that sees stopping is bounded by it
	defer r.o.Fetch.Leave()
	r.stopping.Store(true)
	r.changed.Notify() // ingest admissions waiting for room give up
	if !r.started {
		r.closePartition(r.local) // records admitted before Start end with it
		r.closeClient()
		if r.park != nil {
			r.park.tail.Close()
		}
		return nil
	}
	r.pollCancel()
	// PollRecords returns on cancel, except that it first waits for a
	// rebalance callback that is running (with BlockRebalanceOnPoll, polls and
	// callbacks exclude each other); a revoke that sees stopping is bounded
	// by ctx (expireStop).
	<-r.pollDone
	close(r.holdStop) // no local record is admitted from now on
	<-r.holdDone

	// Drain what was admitted.
	_ = r.changed.Wait(ctx, func() bool { return r.inFlight.Load() == 0 })
	var errs []error
	if n := r.inFlight.Load(); n > 0 {
		errs = append(errs, fmt.Errorf("%d records unfinished at the shutdown deadline: dropped, to be redelivered", n))
	}

	// Commit what finished, in partitions with unfinished records too (their
	// finished prefix), and only then close the partitions: what still runs
	// is dropped and redelivered, what finished is not. A rebalance under
	// way is waited for first (until the deadline): commits made during
	// one wait for it in the client anyway, or fail.
	close(r.commitStop)
	<-r.commitDone
	wait := time.NewTicker(10 * time.Millisecond)
	skip, nothing := false, false
	for {
		for r.rebalancing.Load() && ctx.Err() == nil && r.uncommitted() {
			select {
			case <-ctx.Done():
			case <-r.assignedSig:
			case <-wait.C:
			}
		}
		r.commitMu.lock()
		// A revoke that started meanwhile and waits for commitMu is no
		// join: a commit is fine now. Without one, a join may be under
		// way: wait for it while the deadline allows. Decided on one
		// reading: a revoke starting between two readings would make a
		// second one skip the commit this one chose (onRevoked counts
		// itself in revoking before it sets rebalancing, so a reading
		// that sees its rebalancing sees it revoking).
		rebalancing, revoking := r.rebalancing.Load(), r.revoking.Load() > 0
		if !rebalancing || revoking {
			break
		}
		if !r.uncommitted() {
			// Nothing owned moved past its commit (every partition
			// lost, say): no commit to wait for.
			nothing = true
			break
		}
		if ctx.Err() != nil {
			skip = true
			break
		}
		r.commitMu.unlock()
	}
	wait.Stop()
	// The final commit has commitTimeout past the deadline, not from when
	// it starts: a revoke's commit that ran past the deadline (it is not
	// cut by it) used that time already, and the stop stays within the
	// deadline + commitTimeout + the client's close (docs/operations.md,
	// "Stopping"; the chart's grace period).
	cctx, cancel := context.WithoutCancel(ctx), context.CancelFunc(func() {})
	if dl, ok := ctx.Deadline(); ok {
		cctx, cancel = context.WithDeadline(cctx, dl.Add(commitTimeout))
	}
	switch {
	case skip:
		errs = append(errs, errors.New("final commit skipped: the group was still rebalancing at the deadline; what finished since the last commit is delivered again"))
	case nothing:
	default:
		if err := r.commitAll(cctx); err != nil {
			errs = append(errs, err)
		}
	}
	cancel()
	r.closing.Store(true)
	for _, p := range r.active() {
		r.closePartition(p)
	}
	r.closePartition(r.local)
	r.commitMu.unlock()
	// Parking's loads and actions end with their partitions, closed above;
	// the deadline watcher still runs for the tries of actions.
	if err := r.stopParking(ctx); err != nil {
		errs = append(errs, err)
	}
	close(r.watchStop)
	<-r.watchDone

	r.closeClient() // leaves the group; the final revoke finds nothing left to do
	r.partsMu.Lock()
	for k, p := range r.parts {
		r.closePartition(p)
		delete(r.parts, k)
	}
	r.nparts.Store(0)
	r.partsMu.Unlock()
	if len(errs) > 0 {
		return fmt.Errorf("stopping receiver %s/%s: %w", r.o.Dispatcher, r.o.Context, errors.Join(errs...))
	}
	return nil
}

// Snapshot implements metrics.ReceiverSource.
func (r *Receiver) Snapshot() metrics.ReceiverSnapshot {
	s := metrics.ReceiverSnapshot{
		InFlight:    int(r.inFlight.Load()),
		MaxInFlight: int(r.window),
		Paused:      r.paused.Load() && topicPause(r.pausedFor.Load()) >= pauseWindowFull, // back-pressure: the window full, or records waiting for room in it
		Ready:       r.Ready(),
		// A receiver with nothing in flight has nothing to probe the sink
		// with: past the backoff's delay the poll loop ends it
		// (endIdleBackoff) once it runs again, and an idle member is not a
		// sink down meanwhile (WowdReceiverBackingOff).
		BackingOff:    r.fails.isFailing() && (r.inFlight.Load() > 0 || r.nparts.Load() > 0 && r.fails.holding(time.Now())),
		FetchMaxBytes: int64(r.fetchMaxSeen.Load()),
		BufferedBytes: r.cl.BufferedFetchBytes() + r.heldBytes.Load(),
		ParkFull:      r.parkFull.Load(),
		ParkWaiting:   int(r.parkWaiting.Load()),
	}
	if s.BackingOff {
		s.BackoffDelay = r.fails.current() // 0 otherwise, as its help says
	}
	s.IngestHeld, s.IngestHeldAll = r.holds.count()
	if ps := r.park; ps != nil {
		ps.mu.RLock()
		s.ParkedAggregates = len(ps.parked)
		for _, a := range ps.parked {
			s.OldestParked = max(s.OldestParked, time.Since(a.state.Since))
		}
		ps.mu.RUnlock()
	}
	r.partsMu.RLock()
	s.AssignedPartitions = len(r.parts)
	for _, p := range r.parts {
		p.mu.Lock()
		// From the committed offset, as the metrics say (what a restart or
		// a rebalance would start from): this incarnation's last commit,
		// else the offset it started at, the group's then (its first
		// fetched, held or delivered).
		committed := p.committed.Load()
		if committed < 0 {
			committed = p.fetched
		}
		if committed < 0 {
			committed = p.first
		}
		if p.tr.last >= 0 && committed >= 0 {
			s.CommitLag += max(0, p.tr.last+1-committed)
		}
		if p.hwm > 0 && committed >= 0 {
			s.Lag += max(0, p.hwm-committed)
		}
		if p.paused&pauseSpan != 0 {
			s.PausedPartitions++
		}
		p.mu.Unlock()
	}
	r.partsMu.RUnlock()
	if top := executor.TopBacklogs(1, r.groups...); len(top) > 0 {
		s.MaxKeyBacklog = top[0].Tasks
	}
	return s
}

// PartitionStatus is an owned partition as its receiver sees it.
type PartitionStatus struct {
	Topic     string
	Partition int32
	// Since is when this incarnation began: the partition's assignment, or
	// the client's rewind of it.
	Since time.Time
	// Committed is the offset this assignment of the partition last
	// committed, -1 before its first commit.
	Committed int64
	// Watermark is the offset after the longest finished prefix: what the
	// next commit sends. -1 before a record of this assignment finished.
	Watermark     int64
	HighWatermark int64 // the partition's end as of the last fetch, -1 before
	Unfinished    int64 // records read and not finished (queued or running)
	Waiting       int64 // records fetched, held until the window or the partition's share has room
	Span          int   // records read since the watermark: finished or not
	// Paused says why the partition is paused on its own: "" (not paused),
	// or "span", "share" and "parked-state" joined by '+'.
	Paused string
}

// Partitions returns the status of every owned partition, sorted by topic
// and partition.
func (r *Receiver) Partitions() []PartitionStatus {
	ps := r.active()
	out := make([]PartitionStatus, 0, len(ps))
	for _, p := range ps {
		st := PartitionStatus{Topic: p.topic, Partition: p.partition, Since: p.since, Committed: p.committed.Load(),
			Unfinished: p.pending.Load(), Waiting: p.waiting.Load(), Watermark: -1, HighWatermark: -1}
		p.mu.Lock()
		if next, _, ok := p.tr.watermark(); ok {
			st.Watermark = next
		}
		if p.hwm > 0 {
			st.HighWatermark = p.hwm
		}
		st.Span = p.tr.span()
		st.Paused = p.paused.String()
		p.mu.Unlock()
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b PartitionStatus) int {
		return cmp.Or(strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return out
}

// notify wakes the poll loop without blocking.
func (r *Receiver) notify() {
	select {
	case r.room <- struct{}{}:
	default:
	}
	if wake := r.pollWake.Load(); wake != nil {
		(*wake)()
	}
}

// canceledCtx is a context canceled from the start.
var canceledCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// release returns one slot of the window.
func (r *Receiver) release() {
	if n := r.inFlight.Add(-1); n == r.window-r.batch || (r.pollWaits.Load() && r.pollRoom() == r.batch) {
		r.notify() // the window just got enough room to poll again (slots granted to admissions apart)
	}
	r.changed.Notify() // drains and ingest admissions wait for room
}

// shareCap is the most unfinished records one partition may hold: half the
// window while other partitions are assigned, else all of it.
func (r *Receiver) shareCap() int64 {
	if r.nparts.Load() > 1 {
		return max(r.batch, r.window/2)
	}
	return r.window
}

// reserve takes up to n slots of the window at once and returns how many
// it took.
func (r *Receiver) reserve(n int64) int64 {
	for {
		cur := r.inFlight.Load()
		take := min(n, max(0, r.window-cur))
		if take == 0 || r.inFlight.CompareAndSwap(cur, cur+take) {
			return take
		}
	}
}

// leaveRoom returns how much of the window's room the poll loop takes for
// want records: all it can, but when ingest admissions wait for room too,
// it grants them up to half of it (one slot per admission waiting that has
// none granted yet), which it then counts as taken until they take it
// (pollRoom, Admit).
func (r *Receiver) leaveRoom(want int64) int64 {
	w := r.admitWaiting.Load()
	if w <= 0 || want <= 0 {
		r.grants.Store(0)
		return want
	}
	g := max(0, r.grants.Load())
	free := max(0, r.window-r.inFlight.Load()-g)
	leave := min(max(0, w-g), free/2)
	r.grants.Add(leave)
	return min(want, free-leave)
}

// pollRoom is the window's room for the poll loop: what is free but the slots
// granted to waiting admissions.
func (r *Receiver) pollRoom() int64 {
	free := r.window - r.inFlight.Load()
	if r.admitWaiting.Load() > 0 {
		free -= max(0, r.grants.Load())
	}
	return free
}

// endIdleBackoff ends a backoff whose delay passed with nothing in flight
// to probe the sink (its held messages ended otherwise: refused for good,
// skipped, their partition gone): no success can end it then, and a later
// message's transient failure would be held as the outage's. Called by the
// poll loop.
func (r *Receiver) endIdleBackoff() {
	if r.inFlight.Load() == 0 && r.fails.idle(time.Now()) {
		r.log.Info("backoff over: nothing in flight to probe the sink with; the next failures are judged afresh")
	}
}

func (r *Receiver) pollLoop(ctx context.Context) {
	defer close(r.pollDone)
	// Held records were not admitted: the next owner reads them again.
	defer r.dropAllHeld()
	idle := time.NewTicker(100 * time.Millisecond) // safety net for missed wake-ups
	defer idle.Stop()
	for {
		r.rounds++
		if r.parkFull.Load() {
			// max-parked reached: nothing new until an aggregate is unparked.
			r.pauseTopics(pauseParkedCap)
			if !r.waitRoom(ctx, idle.C) {
				return
			}
			continue
		}
		if hold, until := r.fails.hold(time.Now()); hold {
			// A sink or dependency is down: fetch nothing new until the
			// backoff delay passed, then probe with what comes.
			r.pauseTopics(pauseBackoff)
			t := time.NewTimer(time.Until(until))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-r.room:
			case <-t.C:
			}
			t.Stop()
			continue
		}
		r.endIdleBackoff()
		if r.pollRoom() < r.batch {
			r.pauseTopics(pauseWindowFull)
			r.pollWaits.Store(true) // until the room is taken, below
			if !r.waitRoom(ctx, idle.C) {
				return
			}
			continue
		}
		// A poll takes everything the client buffered; what the window or
		// a partition's share has no room for is held (partition.held)
		// and goes in as room appears. Pausing a partition in the client
		// instead drops what it buffered of it, which is then fetched and
		// decompressed again: many times per record under load.
		ready, active, total := r.heldState()
		full := r.holdFull(active)
		if full {
			// Enough held: the client fetches nothing more meanwhile
			// (nothing is polled while it is paused, so nothing it
			// buffered is dropped).
			r.pauseTopics(pauseRecordsHeld)
		} else if r.paused.Load() {
			// Resume before polling, so nothing buffered is thrown away.
			r.cl.ResumeFetchTopics(r.topics...)
			r.paused.Store(false)
		}
		r.fitFetch()
		var fs kgo.Fetches
		ownTimeout := false // the poll ended on the safety-net timeout below, not on an error
		switch {
		case ready:
			// Held records can go in now: enter a poll at once (admission
			// runs between a poll and AllowRebalance, never alongside a
			// rebalance callback), taking what is buffered unless enough
			// is held already.
			r.cl.PollRecords(r.doneCtx, 0)
			if !full {
				fs = r.cl.PollRecords(nil, r.takeCap())
			}
		case full:
			// Enough is held and none of it can go in: wait for room. When
			// it is memory that is short, the partitions holding records
			// while at their share give theirs back first, so that the
			// others are not held up behind them.
			if r.shedStuck() {
				continue
			}
			if !r.waitRoom(ctx, idle.C) {
				return
			}
			continue
		default:
			if r.pollWaits.Swap(false) {
				// Nothing held: no record waits for room while the poll
				// waits for records, so admissions may take it.
				r.changed.Notify()
			}
			pctx, cancel := ctx, context.CancelFunc(nil)
			if len(r.holding) > 0 {
				// Completions wake it (notify) when held records may go
				// in; the timeout is the safety net of a missed wake-up.
				pctx, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
				r.pollWake.Store(&cancel)
			}
			fs = r.cl.PollRecords(pctx, r.takeCap())
			if cancel != nil {
				ownTimeout = errors.Is(pctx.Err(), context.DeadlineExceeded)
				r.pollWake.Store(nil)
				cancel()
			}
		}
		if fs.IsClientClosed() {
			r.cl.AllowRebalance()
			return
		}
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !(ownTimeout && errors.Is(err, context.DeadlineExceeded)) {
				r.log.Warn("fetch error", zap.String("topic", t), zap.Int32("partition", p), zap.Error(err))
			}
		})
		// The window's room is taken at once: held records first, in the
		// order their partitions came to hold them, then the new ones.
		r.polls++
		r.endIdleBackoff() // before what this poll brought goes in
		budget := r.reserve(r.leaveRoom(int64(total + fs.NumRecords())))
		if r.pollWaits.Swap(false) || r.grants.Load() > 0 {
			r.changed.Notify() // admissions held back for the poll loop look again
		}
		r.admitHeld(&budget)
		// A poll can bring one partition twice (fetches of two brokers
		// buffered across a leader move): admitted in offset order, not in
		// the order of the brokers.
		fps := r.fpBuf[:0]
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			if len(fp.Records) > 0 {
				fps = append(fps, fp)
			}
		})
		slices.SortStableFunc(fps, func(a, b kgo.FetchTopicPartition) int {
			return cmp.Or(strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition),
				cmp.Compare(a.Records[0].Offset, b.Records[0].Offset))
		})
		r.admitFetches(fps, &budget)
		clear(fps)
		r.fpBuf = fps[:0]
		r.pauseHolding()
		if budget > 0 { // room not used: records held, not owned, stopping, rewound
			r.inFlight.Add(-budget)
			r.changed.Notify()
		}
		r.cl.AllowRebalance()
		if ctx.Err() != nil {
			return
		}
	}
}

// topicPause is why the poll loop paused the receiver's topics
// (Receiver.pausedFor), in the poll loop's order of precedence.
type topicPause uint32

const (
	pauseParkedCap   topicPause = iota + 1 // max-parked reached
	pauseBackoff                           // most recent attempts failed: the backoff delay
	pauseWindowFull                        // the window has no room for a poll's batch
	pauseRecordsHeld                       // enough fetched records wait for room (holdFull)
	// The back-pressure reasons are pauseWindowFull and those after it
	// (wowd_receiver_paused).
)

// pauseTopics pauses the receiver's topics in the client, if they are not,
// and records why.
// Only the poll loop pauses and resumes them, and it never polls while they
// are paused, so nothing the client buffered is dropped.
func (r *Receiver) pauseTopics(why topicPause) {
	r.pausedFor.Store(uint32(why))
	if !r.paused.Load() {
		r.cl.PauseFetchTopics(r.topics...)
		r.paused.Store(true)
	}
}

// waitRoom waits for a wake-up of the poll loop (notify) or the next tick
// of idle, the safety net of a missed one. It reports false once ctx is
// done.
func (r *Receiver) waitRoom(ctx context.Context, idle <-chan time.Time) bool {
	select {
	case <-ctx.Done():
		return false
	case <-r.room:
	case <-idle:
	}
	return true
}

// fitFetch sizes the client's fetches to the receiver's part of the memory
// budget, from the compression it observed, and each partition's to the
// records it may hold. A change of less than an eighth is not applied: the
// limits would follow every batch.
func (r *Receiver) fitFetch() {
	// What the receiver holds is left out of the client's part; and half
	// of the rest too: the client fetches the next while the receiver
	// holds what it took of the last, so each fetch gets half of what
	// is left.
	held := r.heldBytes.Load()
	r.o.Fetch.Hold(held + max(0, r.o.Fetch.Part()-held)/2)
	// Each broker may hold a fetch of the client's. Before the client's
	// first metadata (the fit in New) it knows none: its seeds, often
	// every broker, are the better guess than one.
	brokers := max(len(r.cl.DiscoveredBrokers()), r.seeds)
	maxBytes, maxPart := r.o.Fetch.Limits(brokers, int(r.shareCap()))
	near := func(a, b int32) bool { d := a - b; return d < b/8 && -d < b/8 }
	if r.fetchMax != 0 && near(maxBytes, r.fetchMax) && near(maxPart, r.fetchPart) {
		return
	}
	r.cl.UpdateFetchMaxBytes(maxBytes, maxPart)
	r.fetchMax, r.fetchPart = maxBytes, maxPart
	r.fetchMaxSeen.Store(maxBytes)
}

// admitFetches admits the fetches of one poll, in partition and offset
// order, with the window slots in budget. Once the client was sent back
// before a fetch of a partition (rewind), the partition's later fetches of
// the poll are not admitted either: they come again after the records the
// client goes back to, which a new incarnation must not skip.
func (r *Receiver) admitFetches(fps []kgo.FetchTopicPartition, budget *int64) {
	var back []tp // rare: the partitions the client was sent back on
	for _, fp := range fps {
		k := tp{fp.Topic, fp.Partition}
		if slices.Contains(back, k) {
			continue
		}
		if !r.admit(fp, budget) {
			back = append(back, k)
		}
	}
}

// admitPartition admits one partition's records, taking their window slots.
// (The poll loop uses admit with the slots it reserved; tests that drive
// the polls by hand use this.)
func (r *Receiver) admitPartition(fp kgo.FetchTopicPartition) { r.admit(fp, nil) }

// admit takes one partition's polled records in. With a budget (the window
// slots the poll loop reserved), they join the partition's held records
// and as many go to the executor as the budget and the partition's share
// allow; without one, all go. It runs between a poll and AllowRebalance:
// no rebalance callback runs meanwhile. It reports false when the client
// was sent back before these records (see rewind): they come again.
func (r *Receiver) admit(fp kgo.FetchTopicPartition, budget *int64) bool {
	if len(fp.Records) == 0 || r.stopping.Load() {
		return true // not admitted, not tracked: redelivered after restart
	}
	r.partsMu.RLock()
	p := r.parts[tp{fp.Topic, fp.Partition}]
	r.partsMu.RUnlock()
	if p == nil || p.isClosed() {
		r.log.Warn("records of a partition not owned", zap.String("topic", fp.Topic), zap.Int32("partition", fp.Partition))
		return true
	}
	first := fp.Records[0].Offset
	if n := len(p.held); n > 0 && first <= p.held[n-1].Offset {
		// The client went back over records it had delivered: they come
		// again, so what is held from there on goes.
		r.dropHeld(p, sort.Search(n, func(i int) bool { return p.held[i].Offset >= first }))
	}
	p.mu.Lock()
	last := p.tr.last
	unfinished, epoch := p.tr.firstUnfinished()
	p.hwm = fp.HighWatermark
	if p.fetched < 0 {
		p.fetched = first
	}
	p.mu.Unlock()
	if last >= 0 && first <= last {
		if p = r.rewind(p, first, last, unfinished, epoch); p == nil {
			return false // the client goes back further first; these come again
		}
		p.mu.Lock()
		p.hwm = fp.HighWatermark
		if p.fetched < 0 {
			p.fetched = first
		}
		p.mu.Unlock()
	}
	if budget == nil {
		r.inFlight.Add(int64(len(fp.Records)))
		r.admitRecords(p, fp.Records)
		return true
	}
	if !p.listed {
		r.holding = append(r.holding, p)
		p.listed = true
	}
	p.holding.Store(true)
	p.held = append(p.held, fp.Records...)
	p.waiting.Store(int64(len(p.held)))
	p.fetchN = max(p.fetchN, len(fp.Records))
	n := recordBytes(fp.Records)
	r.heldBytes.Add(n)
	if per := n / int64(len(fp.Records)); r.recBytes == 0 {
		r.recBytes = per
	} else {
		r.recBytes += (per - r.recBytes) / 8
	}
	r.admitHeldOf(p, budget)
	return true
}

// heldState reports whether held records could go in now (the window has
// room and a partition holding some is a batch below its share and not
// paused for its span or its parked state), how many are held in
// partitions that could take them in (a partition at its share holds its
// own records up: they must not stop the others being fetched), and how
// many in all. It forgets the partitions closed meanwhile and
// those whose held records all went in.
func (r *Receiver) heldState() (ready bool, active, total int) {
	room := r.inFlight.Load() < r.window
	share := r.shareCap()
	kept := r.holding[:0]
	for _, p := range r.holding {
		if p.isClosed() {
			r.dropHeld(p, 0)
			p.listed = false
			continue
		}
		if len(p.held) == 0 {
			p.listed = false // all of it went in
			continue
		}
		kept = append(kept, p)
		p.mu.Lock()
		paused := p.paused
		p.mu.Unlock()
		total += len(p.held)
		can := paused&(pauseSpan|pauseLoading) == 0 && p.pending.Load() <= share-r.batch
		if can && paused&pauseShare == 0 {
			active += len(p.held)
		}
		if can && room {
			ready = true
		}
	}
	clear(r.holding[len(kept):])
	r.holding = kept
	return ready, active, total
}

// takeCap is the most records a poll may take from the client: all of them
// (0) without a memory budget; with one, about as many as the client's
// part of it has room for besides what is held. What is not taken stays
// in the client, whose fetches already count in that part: taking a whole
// fetch whose first batch exceeded the limit (Kafka sends a partition's
// first batch whole) while holding the rest would count it twice.
func (r *Receiver) takeCap() int {
	part := r.o.Fetch.Part()
	if part <= 0 {
		return 0
	}
	per := r.recBytes
	if per <= 0 {
		per = 1 << 10 // before the first record taken
	}
	return int(max(1, (part-r.heldBytes.Load())/per))
}

// holdFull reports whether enough is held (active: records held in
// partitions fetched on) for the poll loop to stop taking what the client
// buffered: twice the window, or the client's part of the memory budget
// in bytes. (The client then buffers one fetch per broker and waits; its
// fetches are sized to the part less what is held.)
func (r *Receiver) holdFull(active int) bool {
	if part := r.o.Fetch.Part(); part > 0 && r.heldBytes.Load() >= part {
		return true
	}
	return active >= int(2*r.window)
}

// admitHeld admits held records of every partition holding some, as far
// as budget and their shares go, starting each round with the partition
// after the one that started the last.
func (r *Receiver) admitHeld(budget *int64) {
	n := len(r.holding)
	if n == 0 || r.stopping.Load() {
		return
	}
	ps := append(r.heldOrder[:0], r.holding...)
	r.heldOrder = ps
	start := r.heldTurn % n
	r.heldTurn++
	for i := range n {
		if *budget <= 0 {
			break
		}
		if p := ps[(start+i)%n]; !p.isClosed() {
			r.admitHeldOf(p, budget)
		}
	}
	clear(ps)
}

// admitHeldOf admits p's held records, as far as budget and p's share go.
func (r *Receiver) admitHeldOf(p *partition, budget *int64) {
	if len(p.held) == 0 {
		return
	}
	p.mu.Lock()
	paused := p.paused
	p.mu.Unlock()
	if paused&(pauseSpan|pauseLoading) != 0 {
		return
	}
	k := min(int64(len(p.held)), *budget, r.shareCap()-p.pending.Load())
	if k <= 0 {
		return
	}
	*budget -= k
	r.admitRecords(p, p.held[:k])
	r.heldBytes.Add(-recordBytes(p.held[:k]))
	clear(p.held[:k]) // the jobs copied them: the batches they came in may go
	p.held = p.held[k:]
	p.waiting.Store(int64(len(p.held)))
	if len(p.held) == 0 {
		p.held = nil
		p.holding.Store(false) // stays in r.holding until the next heldState
		p.mu.Lock()
		r.unpauseLocked(p, pauseShare)
		p.mu.Unlock()
	}
}

// dropHeld drops p's held records from the i-th on (the client delivers
// them again, or p is closed).
func (r *Receiver) dropHeld(p *partition, i int) {
	r.heldBytes.Add(-recordBytes(p.held[i:]))
	clear(p.held[i:])
	p.waiting.Store(int64(i))
	if p.held = p.held[:i]; i == 0 {
		p.held = nil
		p.holding.Store(false)
	}
}

// dropAllHeld drops every held record as the poll loop, which alone
// touches them, ends: they stay neither counted in the buffered bytes nor
// referenced by a stopped receiver.
func (r *Receiver) dropAllHeld() {
	for _, p := range r.holding {
		r.dropHeld(p, 0)
		p.listed = false
	}
	clear(r.holding)
	r.holding = r.holding[:0]
}

// shedStuck gives back, when the held records fill the client's part of
// the memory budget, those of the partitions that cannot take them in now
// (at their share, or paused for their span or parked state): they are
// dropped, the client is sent back to the first of them and pauses the
// partition until its unfinished records are down to half its share. It
// reports whether it gave any back.
func (r *Receiver) shedStuck() bool {
	if part := r.o.Fetch.Part(); part <= 0 || r.heldBytes.Load() < part {
		return false
	}
	r.cl.PollRecords(r.doneCtx, 0) // no rebalance callback meanwhile
	defer r.cl.AllowRebalance()
	share, shed := r.shareCap(), false
	for _, p := range r.holding {
		if len(p.held) == 0 || p.isClosed() {
			continue
		}
		p.mu.Lock()
		can := p.paused&(pauseSpan|pauseLoading) == 0 && p.pending.Load() <= share-r.batch
		if !can {
			r.pauseLocked(p, pauseShare) // before its records go: completions from now on may lift it
		}
		p.mu.Unlock()
		if can {
			continue
		}
		// Back to the first held record, with its leader epoch: a leader
		// move until it is fetched again is checked for a truncation as
		// any fetch position is (an epoch of -1 would turn that off).
		first, epoch := p.held[0].Offset, p.held[0].LeaderEpoch
		r.sendBack(p, first, epoch)
		r.dropHeld(p, 0)
		p.mu.Lock()
		r.liftShareLocked(p, p.pending.Load()) // finished meanwhile: no completion is left to lift it
		p.mu.Unlock()
		shed = true
	}
	return shed
}

// recordBytes sums the keys, values and headers of recs.
func recordBytes(recs []*kgo.Record) int64 {
	var n int
	for _, rec := range recs {
		n += len(rec.Key) + len(rec.Value)
		for _, h := range rec.Headers {
			n += len(h.Key) + len(h.Value)
		}
	}
	return int64(n)
}

// pauseHolding pauses in the client the partitions that hold their share of
// the window and, waiting, two more shares and two of their largest polls
// (fetching them more is pointless), and resumes the paused ones down to
// half that. (When
// it is the window that is full, not the partition's share, the poll loop
// stops taking from the client instead, which drops nothing.)
func (r *Receiver) pauseHolding() {
	share := r.shareCap()
	for _, p := range r.holding {
		n := int64(len(p.held))
		p.mu.Lock()
		switch {
		case p.paused&pauseShare == 0 && n >= 2*(share+int64(p.fetchN)) && p.pending.Load() > share-r.batch:
			r.pauseLocked(p, pauseShare)
			r.log.Debug("partition paused: it holds its share of the window, and more of its records wait (a slow or stuck aggregate with a backlog)",
				zap.String("topic", p.topic), zap.Int32("partition", p.partition), zap.Int64("unfinished", p.pending.Load()), zap.Int64("held", n))
		case p.paused&pauseShare != 0 && n <= share+int64(p.fetchN):
			r.unpauseLocked(p, pauseShare)
		}
		p.mu.Unlock()
	}
}

// admitRecords hands records of p to the executor in one batch, in offset
// order; their window slots are taken already.
func (r *Receiver) admitRecords(p *partition, recs []*kgo.Record) {
	route := r.routes[p.topic]
	p.pending.Add(int64(len(recs)))
	// Only the poll loop uses these buffers.
	keys, tasks := r.keyBuf[:0], r.taskBuf[:0]
	p.mu.Lock()
	if p.first < 0 {
		p.first = recs[0].Offset
	}
	for _, rec := range recs {
		j := newJob(r, p, rec, p.tr.nextSeq())
		p.tr.push(rec.Offset, rec.LeaderEpoch, j)
		if route != nil && len(rec.Key) > 0 {
			j.route, j.kind = route, route.Kind
			j.msg.Context, j.msg.Aggregate, j.msg.Kind = route.Context, route.Aggregate, route.Kind
		}
		tasks = append(tasks, j)
	}
	if p.paused&pauseSpan == 0 && p.tr.span() > r.spanCap {
		r.pauseLocked(p, pauseSpan)
		// Named, as the docs and WowdPartitionHeld say: the oldest
		// unfinished record is the one holding the commit.
		head, key := int64(-1), ""
		p.tr.jobs(func(j *job) {
			if head < 0 {
				head, key = j.rec.Offset, j.msg.AggregateID
			}
		})
		r.log.Info("partition paused: a record holds its commit while later ones finish (a slow or hot aggregate)",
			zap.String("topic", p.topic), zap.Int32("partition", p.partition), zap.Int("span", p.tr.span()),
			zap.Int64("offset", head), zap.String("aggregate", key))
	}
	p.mu.Unlock()
	// Records no handler can take are finished here; the rest go to their
	// mailboxes.
	routed := tasks[:0]
	for _, t := range tasks {
		j := t.(*job)
		switch {
		case j.rec.Attrs.IsControl():
			j.passMarker()
		case j.route != nil:
			keys, routed = append(keys, j.msg.AggregateID), append(routed, j)
		case route == nil:
			j.unroutable("no route for topic")
		default:
			j.unroutable("record has no key (the aggregate ID)")
		}
	}
	if len(keys) > 0 {
		n, err := route.Group.SubmitBatch(keys, routed)
		if err != nil {
			for _, t := range routed[n:] {
				t.(*job).drop() // executor closing: not finished, redelivered later
			}
		}
	}
	clear(keys)
	clear(tasks)
	r.keyBuf, r.taskBuf = keys[:0], tasks[:0]
}

// sendBack makes the client fetch p again from offset, the offset of a
// record of leader epoch epoch.
func (r *Receiver) sendBack(p *partition, offset int64, epoch int32) {
	to := map[string]map[int32]kgo.EpochOffset{p.topic: {p.partition: {Epoch: epoch, Offset: offset}}}
	if r.seek != nil {
		r.seek(to)
		return
	}
	r.cl.SetOffsets(to)
}

// rewind starts a new incarnation of p, whose client went back from last to
// first: the broker reported that records the client had read were lost
// (the log was truncated), and the client resumed where the log diverged
// (or at wow.kafka's start offset). The records read before the rewind may
// not be what the log holds now, so their finished prefix is committed no
// more: the old incarnation is closed (its unfinished records dropped), and
// the new one counts from where the client resumed. If the old incarnation
// had an unfinished record below first (unfinished, -1 when none; epoch is
// its leader epoch), the client is sent back to it first, so that nothing
// the old incarnation left unfinished is skipped; rewind then returns nil
// and the fetch in hand is not admitted (it comes again). The epoch goes
// with the offset, so that the client checks the log against it as it does
// after any fetch: were the log truncated below that record too, the
// client would find the divergence and rewind again, instead of reading
// whatever the log holds at that offset by then. It runs in the poll loop, between a poll
// and AllowRebalance, and waits for a commit under way so that none of the
// old incarnation can be sent after it.
func (r *Receiver) rewind(p *partition, first, last, unfinished int64, epoch int32) *partition {
	back := unfinished >= 0 && unfinished < first
	to := first
	if back {
		to = unfinished
	}
	r.log.Warn("the Kafka client rewound the partition (the broker reported lost records); delivering again from there",
		zap.String("topic", p.topic), zap.Int32("partition", p.partition), zap.Int64("from", last),
		zap.Int64("client_resumed_at", first), zap.Int64("delivering_from", to))
	r.m.Rewind()
	np := newPartition(p.topic, p.partition)
	np.member = p.member                   // the same membership
	np.parkEpoch.Store(p.parkEpoch.Load()) // the same ownership: its parked aggregates stay
	// What actions resolved stays resolved below first, where the log is
	// what it was; the records from first on may be others now.
	p.unparkedMu.Lock()
	for id, floor := range p.unparked {
		if f := min(floor, first); f > 0 {
			np.noteUnparked(id, f)
		}
	}
	p.unparkedMu.Unlock()
	r.commitMu.lock()
	r.partsMu.Lock()
	r.parts[tp{p.topic, p.partition}] = np
	r.partsMu.Unlock()
	r.closePartition(p)
	r.commitMu.unlock()
	if back {
		r.sendBack(p, to, epoch)
		return nil
	}
	return np
}

// checkTopics lists the receiver's topics at start and says which do not
// exist: a receiver none of whose topics exists joins its group only once
// one does (kgo consumes no topic it cannot find), which leaves the
// replica unready with nothing else to name why. A failed listing (within
// 2 s) says nothing.
func (r *Receiver) checkTopics(ctx context.Context) {
	// Briefly: with Kafka unreachable at start, the rest of Start's budget
	// is the dead-letter topics' and the producer ID's.
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	listed, err := kadm.NewClient(r.cl).ListTopics(ctx, r.topics...)
	if err != nil {
		return
	}
	var missing []string
	for _, t := range r.topics {
		if st, ok := listed[t]; !ok || st.Err != nil {
			missing = append(missing, t)
		}
	}
	switch {
	case len(missing) == 0:
		return
	case len(missing) == len(r.topics):
		r.noTopics.Store(&missing)
		r.log.Warn("none of the receiver's topics exists: it joins its consumer group once one does (a Wow service creates them as it first writes; check the context's alias and wow.kafka.topic-prefix)",
			zap.Strings("topics", missing))
	default:
		r.log.Info("some of the receiver's topics do not exist yet; they are read once they do", zap.Strings("topics", missing))
	}
}

// NoTopicsAtStart returns the receiver's topics when none of them existed
// at start (nil otherwise, or when they could not be listed): why it may
// not have joined its group.
func (r *Receiver) NoTopicsAtStart() []string {
	if p := r.noTopics.Load(); p != nil {
		return *p
	}
	return nil
}
