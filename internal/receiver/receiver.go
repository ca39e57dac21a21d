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
// asking for no more records than are free. A partition whose uncommitted
// span (records read since its committed offset) exceeds four windows, which
// happens when one record is stuck while later ones finish, is paused on its
// own until the span shrinks. The client's prefetch is bounded by its fetch
// options, so memory is bounded by configuration, not by lag.
//
// # Rebalances
//
// Each assignment of a partition starts a new incarnation with its own
// tracker and context. On revoke the receiver waits (up to RevokeTimeout) for
// the partition's unfinished records, commits its watermark synchronously and
// only then lets the partition go; records still unfinished at the deadline
// are dropped (their handler contexts canceled) and redelivered to the next
// owner. On loss nothing is committed. Completions of an old incarnation are
// ignored. Partition-level pauses are lifted when a partition goes.
//
// # Goroutines and locks
//
// The receiver owns two goroutines, the poll loop and the committer, both
// stopped by Stop. commitMu serializes commits with the rebalance callbacks,
// so offsets of a partition are never sent after its revoke returned.
// partsMu guards the incarnation map. partition.mu guards a tracker. Lock
// order: commitMu → partsMu → partition.mu.
package receiver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/executor"
	"github.com/wowd/wowd/internal/metrics"
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

	Handler     handler.Handler
	HandlerType string
	DeadLetter  DeadLetter

	// Wow decodes each record as a Wow message: checked against its key and
	// topic, filtered by Events and Commands, given to the handler decoded.
	// Records that do not decode or check go to the dead-letter path.
	Wow      bool
	Events   map[string]bool // event names wanted; empty: all
	Commands map[string]bool // command names wanted; empty: all

	// ClientOpts connect to Kafka: brokers, TLS, SASL, fetch limits, group
	// timeouts, start offset, balancer. The receiver adds the group, topics,
	// callbacks and commit options itself.
	ClientOpts []kgo.Opt

	Logger  *zap.Logger
	Metrics *metrics.Metrics // nil: no metrics
}

// Receiver is one consumer-group member feeding the executor.
type Receiver struct {
	o       Options
	log     *zap.Logger
	cl      *kgo.Client
	m       *metrics.Receiver
	topics  []string
	routes  map[string]*Route // o.Routes, addressable
	keyBuf  []string          // scratch of the poll loop
	taskBuf []executor.Task   // scratch of the poll loop
	window  int64
	batch   int64
	spanCap int

	fails    streak // recent handler outcomes: backs off while a sink is down
	inFlight atomic.Int64
	room     chan struct{} // poll loop wake-up: window space or a partition to resume
	paused   atomic.Bool   // topics paused because the window is full
	joined   atomic.Bool
	stopping atomic.Bool // admission stopped: records polled from now on are not admitted
	closing  atomic.Bool // revokes no longer wait: Stop already drained

	commitMu sync.Mutex // serializes commits and rebalance callbacks

	partsMu sync.RWMutex // guards parts
	parts   map[tp]*partition

	// local holds the records admitted through Admit: no tracker of it is
	// committed; it closes when the receiver stops.
	local *partition

	pollCancel context.CancelFunc
	pollDone   chan struct{}
	commitStop chan struct{}
	commitDone chan struct{}
	started    bool
	stopOnce   sync.Once
	stopErr    error
}

type tp struct {
	topic     string
	partition int32
}

// New builds a receiver; it connects nothing until Start.
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
		o:          o,
		log:        o.Logger,
		window:     int64(o.MaxInFlight),
		batch:      max(1, int64(o.MaxInFlight)/16),
		spanCap:    4 * o.MaxInFlight,
		room:       make(chan struct{}, 1),
		parts:      make(map[tp]*partition),
		local:      newPartition("", -1),
		pollDone:   make(chan struct{}),
		commitStop: make(chan struct{}),
		commitDone: make(chan struct{}),
	}
	r.routes = make(map[string]*Route, len(o.Routes))
	for t, rt := range o.Routes {
		r.topics = append(r.topics, t)
		r.routes[t] = &rt
	}
	if o.Metrics != nil {
		r.m = o.Metrics.Receiver(o.Dispatcher, o.Context, o.HandlerType, r)
	}
	opts := append([]kgo.Opt{}, o.ClientOpts...)
	opts = append(opts,
		kgo.ConsumerGroup(o.GroupID),
		kgo.ConsumeTopics(r.topics...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(r.onAssigned),
		kgo.OnPartitionsRevoked(r.onRevoked),
		kgo.OnPartitionsLost(r.onLost),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka client for %s/%s: %w", o.Dispatcher, o.Context, err)
	}
	r.cl = cl
	return r, nil
}

// Start begins consuming. The receiver's goroutines run until Stop.
func (r *Receiver) Start() {
	if r.o.DeadLetter.Enabled {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r.ensureDeadLetterTopics(ctx)
		cancel()
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.pollCancel = cancel
	r.started = true
	go r.pollLoop(ctx)
	go r.commitLoop()
}

// Ready reports whether the receiver has joined its consumer group.
func (r *Receiver) Ready() bool { return r.joined.Load() }

// InFlight returns the number of unfinished records.
func (r *Receiver) InFlight() int { return int(r.inFlight.Load()) }

// Client returns the receiver's Kafka client (for producing from the same
// connection, and for tests).
func (r *Receiver) Client() *kgo.Client { return r.cl }

// Stop stops admitting records, waits for unfinished ones until ctx is done,
// commits, leaves the group and closes the client. Records not finished by
// then are dropped and redelivered after the next start.
func (r *Receiver) Stop(ctx context.Context) error {
	r.stopOnce.Do(func() { r.stopErr = r.stop(ctx) })
	return r.stopErr
}

func (r *Receiver) stop(ctx context.Context) error {
	r.stopping.Store(true)
	if !r.started {
		r.cl.Close()
		return nil
	}
	r.pollCancel()
	<-r.pollDone // PollRecords returns at once on cancel; the loop never blocks on anything else

	// Drain what was admitted.
	tick := time.NewTicker(2 * time.Millisecond)
	for r.inFlight.Load() > 0 && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	tick.Stop()
	var errs []error
	if n := r.inFlight.Load(); n > 0 {
		errs = append(errs, fmt.Errorf("%d records unfinished at the shutdown deadline: dropped, to be redelivered", n))
		r.partsMu.RLock()
		for _, p := range r.parts {
			p.close()
		}
		r.partsMu.RUnlock()
	}
	r.local.close()

	close(r.commitStop)
	<-r.commitDone
	r.commitMu.Lock()
	if err := r.commitAll(context.WithoutCancel(ctx)); err != nil {
		errs = append(errs, err)
	}
	r.closing.Store(true)
	r.commitMu.Unlock()

	r.cl.Close() // leaves the group; the final revoke finds nothing left to do
	r.partsMu.Lock()
	for k, p := range r.parts {
		p.close()
		delete(r.parts, k)
	}
	r.partsMu.Unlock()
	if len(errs) > 0 {
		return fmt.Errorf("stopping receiver %s/%s: %w", r.o.Dispatcher, r.o.Context, errors.Join(errs...))
	}
	return nil
}

// Snapshot implements metrics.ReceiverSource.
func (r *Receiver) Snapshot() metrics.ReceiverSnapshot {
	s := metrics.ReceiverSnapshot{
		InFlight:     int(r.inFlight.Load()),
		MaxInFlight:  int(r.window),
		Paused:       r.paused.Load(),
		Joined:       r.joined.Load(),
		BackingOff:   r.fails.isFailing(),
		BackoffDelay: r.fails.current(),
	}
	r.partsMu.RLock()
	s.AssignedPartitions = len(r.parts)
	for _, p := range r.parts {
		p.mu.Lock()
		if p.tr.last >= 0 {
			next, _, ok := p.tr.watermark()
			if !ok {
				next = p.first
			}
			s.CommitLag += p.tr.last + 1 - next
		}
		if p.hwm > 0 {
			next, _, ok := p.tr.watermark()
			if !ok {
				next = p.first
			}
			if next >= 0 {
				s.Lag += max(0, p.hwm-next)
			}
		}
		if p.spanPaused {
			s.PausedPartitions++
		}
		p.mu.Unlock()
	}
	r.partsMu.RUnlock()
	groups := make(map[uint32]bool, len(r.o.Routes))
	for _, rt := range r.o.Routes {
		groups[rt.Group.ID()] = true
	}
	for _, b := range r.o.Routes[r.topics[0]].Group.Executor().TopBacklogs(32) {
		if groups[b.Group] {
			s.MaxKeyBacklog = b.Tasks
			break
		}
	}
	return s
}

// notify wakes the poll loop without blocking.
func (r *Receiver) notify() {
	select {
	case r.room <- struct{}{}:
	default:
	}
}

// release returns one slot of the window.
func (r *Receiver) release() {
	if r.inFlight.Add(-1) == r.window-r.batch {
		r.notify() // the window just got enough room to poll again
	}
}

func (r *Receiver) pollLoop(ctx context.Context) {
	defer close(r.pollDone)
	idle := time.NewTicker(100 * time.Millisecond) // safety net for missed wake-ups
	defer idle.Stop()
	for {
		if hold, until := r.fails.hold(time.Now()); hold {
			// A sink or dependency is down: fetch nothing new until the
			// backoff delay passed, then probe with what comes.
			if !r.paused.Load() {
				r.cl.PauseFetchTopics(r.topics...)
				r.paused.Store(true)
			}
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
		free := r.window - r.inFlight.Load()
		if free < r.batch {
			if !r.paused.Load() {
				r.cl.PauseFetchTopics(r.topics...)
				r.paused.Store(true)
			}
			select {
			case <-ctx.Done():
				return
			case <-r.room:
			case <-idle.C:
			}
			continue
		}
		if r.paused.Load() {
			// Resume before polling, so nothing buffered is thrown away.
			r.cl.ResumeFetchTopics(r.topics...)
			r.paused.Store(false)
		}
		fs := r.cl.PollRecords(ctx, int(free))
		if fs.IsClientClosed() {
			r.cl.AllowRebalance()
			return
		}
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				r.log.Warn("fetch error", zap.String("topic", t), zap.Int32("partition", p), zap.Error(err))
			}
		})
		fs.EachPartition(r.admitPartition)
		r.cl.AllowRebalance()
		if ctx.Err() != nil {
			return
		}
	}
}

// admitPartition hands one partition's polled records to the executor. It
// runs between a poll and AllowRebalance: no rebalance callback runs
// meanwhile.
func (r *Receiver) admitPartition(fp kgo.FetchTopicPartition) {
	if len(fp.Records) == 0 || r.stopping.Load() {
		return // not admitted, not tracked: redelivered after restart
	}
	r.partsMu.RLock()
	p := r.parts[tp{fp.Topic, fp.Partition}]
	r.partsMu.RUnlock()
	if p == nil || p.isClosed() {
		r.log.Warn("records of a partition not owned", zap.String("topic", fp.Topic), zap.Int32("partition", fp.Partition))
		return
	}
	route := r.routes[fp.Topic]
	p.mu.Lock()
	p.hwm = fp.HighWatermark
	if p.first < 0 {
		p.first = fp.Records[0].Offset
	}
	seqs := p.seqBuf[:0]
	for _, rec := range fp.Records {
		seqs = append(seqs, p.tr.push(rec.Offset, rec.LeaderEpoch))
	}
	p.seqBuf = seqs
	if !p.spanPaused && p.tr.span() > r.spanCap {
		p.spanPaused = true
		r.cl.PauseFetchPartitions(map[string][]int32{p.topic: {p.partition}})
		r.log.Info("partition paused: a record holds its commit while later ones finish (a slow or hot aggregate)",
			zap.String("topic", p.topic), zap.Int32("partition", p.partition), zap.Int("span", p.tr.span()))
	}
	p.mu.Unlock()
	p.pending.Add(int64(len(fp.Records)))
	r.inFlight.Add(int64(len(fp.Records)))
	// The partition's records go to the executor in one batch, in offset
	// order; only the poll loop uses these buffers.
	keys, tasks := r.keyBuf[:0], r.taskBuf[:0]
	for i, rec := range fp.Records {
		j := newJob(r, p, rec, seqs[i])
		switch {
		case route == nil:
			j.unroutable("no route for topic")
		case len(rec.Key) == 0:
			j.unroutable("record has no key (the aggregate ID)")
		default:
			j.route, j.kind = route, route.Kind
			j.msg.Context, j.msg.Aggregate, j.msg.Kind = route.Context, route.Aggregate, route.Kind
			keys, tasks = append(keys, j.msg.AggregateID), append(tasks, j)
		}
	}
	if len(keys) > 0 {
		n, err := route.Group.SubmitBatch(keys, tasks)
		if err != nil {
			for _, t := range tasks[n:] {
				t.(*job).drop() // executor closing: not finished, redelivered later
			}
		}
	}
	clear(keys)
	clear(tasks)
	r.keyBuf, r.taskBuf = keys[:0], tasks[:0]
}
