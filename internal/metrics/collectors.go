package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ReceiverSnapshot is a receiver's state at one instant.
type ReceiverSnapshot struct {
	InFlight           int   // unfinished messages (running or queued)
	MaxInFlight        int   // the window
	Paused             bool  // fetching paused because the window is full
	PausedPartitions   int   // partitions paused because of a long uncommitted span
	AssignedPartitions int   // partitions owned now
	Ready              bool  // a member of its group and, when it parks, has read which aggregates are parked (receiver.Ready: what /readyz waits for)
	CommitLag          int64 // records read but not yet committed, over owned partitions
	Lag                int64 // records between the committed offsets and the partitions' ends
	MaxKeyBacklog      int   // most messages waiting for one aggregate ID of this receiver
	BackingOff         bool  // most recent handler attempts failed: fetching paused, failures held
	BackoffDelay       time.Duration
	BufferedBytes      int64         // record bytes fetched and not yet in the window: in the Kafka client, or held by the receiver
	FetchMaxBytes      int64         // the client's fetch limit set from the memory budget; 0: the configured one
	ParkedAggregates   int           // aggregates parked in the owned partitions
	OldestParked       time.Duration // age of the oldest parked aggregate's parking; 0 when none
	ParkFull           bool          // max-parked reached: fetching paused until an aggregate is unparked
	ParkWaiting        int           // failed messages waiting for room among max-parked parked aggregates
	IngestHeld         int           // groups of aggregates (by hash) whose ingested messages go through Kafka until a copy given up earlier is handled
	IngestHeldAll      bool          // the start barrier stands for some partition: their aggregates' ingested messages go through Kafka
}

// ReceiverSource gives a receiver's snapshot; called at scrape time.
type ReceiverSource interface {
	Snapshot() ReceiverSnapshot
}

var receiverLabels = []string{"dispatcher", "context"}

var (
	descInFlight = prometheus.NewDesc(Namespace+"_receiver_in_flight",
		"Unfinished messages of the receiver (running or queued in a mailbox).", receiverLabels, nil)
	descMaxInFlight = prometheus.NewDesc(Namespace+"_receiver_max_in_flight",
		"The receiver's window: most unfinished messages before it pauses fetching.", receiverLabels, nil)
	descPaused = prometheus.NewDesc(Namespace+"_receiver_paused",
		"1 while the receiver's fetching is paused because its window is full, or because the records that wait for room in it (or in their partition's share) fill its part of the memory budget or reach twice its window; not while it is paused for a backoff or for max-parked (wowd_receiver_backing_off, wowd_receiver_park_full).", receiverLabels, nil)
	descPausedPartitions = prometheus.NewDesc(Namespace+"_receiver_paused_partitions",
		"Partitions paused because their uncommitted span grew too long (a message stuck at the head).", receiverLabels, nil)
	descAssigned = prometheus.NewDesc(Namespace+"_receiver_assigned_partitions",
		"Partitions the receiver owns.", receiverLabels, nil)
	descJoined = prometheus.NewDesc(Namespace+"_receiver_ready",
		"1 once the receiver is ready, as /readyz asks: a member of its consumer group and, when it parks aggregates, having read which are parked.", receiverLabels, nil)
	descCommitLag = prometheus.NewDesc(Namespace+"_commit_lag_records",
		"Records read from owned partitions but not yet committed.", receiverLabels, nil)
	descLag = prometheus.NewDesc(Namespace+"_receiver_lag_records",
		"Records between the committed offsets and the ends of the owned partitions, as of the last fetch.", receiverLabels, nil)
	descKeyBacklog = prometheus.NewDesc(Namespace+"_receiver_max_key_backlog",
		"Most messages waiting for a single aggregate ID of the receiver: a hot aggregate shows here.", receiverLabels, nil)
	descBackingOff = prometheus.NewDesc(Namespace+"_receiver_backing_off",
		"1 while most recent handler attempts fail transiently (a sink is down): fetching is paused and failures are held, not dead-lettered. A receiver left without partitions or records reads 0 (it has nothing to probe the sink with) and backs off again once it owns a partition.", receiverLabels, nil)
	descBuffered = prometheus.NewDesc(Namespace+"_receiver_buffered_bytes",
		"Bytes of records (decompressed) fetched and not yet in the window: held by the receiver's Kafka client, or by the receiver until the window or the partition's share has room. What wow.memory.fetch-percent bounds.", receiverLabels, nil)
	descFetchMax = prometheus.NewDesc(Namespace+"_receiver_fetch_max_bytes",
		"The receiver's fetch limit (compressed bytes per fetch), sized from its part of the memory budget and the compression it observes.", receiverLabels, nil)
	descParked = prometheus.NewDesc(Namespace+"_parked_aggregates",
		"Aggregates parked in the receiver's owned partitions: a message of each failed for good, and it and the aggregate's later messages wait in the parked topic for a redrive, skip or discard.", receiverLabels, nil)
	descParkedAge = prometheus.NewDesc(Namespace+"_parked_oldest_age_seconds",
		"Time since the oldest parked aggregate of the receiver's owned partitions was parked; 0 when none is.", receiverLabels, nil)
	descParkFull = prometheus.NewDesc(Namespace+"_receiver_park_full",
		"1 while the receiver holds max-parked parked aggregates and another must park: fetching is paused until one is unparked.", receiverLabels, nil)
	descParkWaiting = prometheus.NewDesc(Namespace+"_receiver_park_waiting",
		"Failed messages waiting for room to park their aggregates while max-parked aggregates are parked already. Fetching stays paused (wowd_receiver_park_full) only while one waits: a message that stops waiting (its partition revoked, its aggregate parked meanwhile) lifts the pause.", receiverLabels, nil)
	descIngestHeld = prometheus.NewDesc(Namespace+"_receiver_ingest_held_aggregates",
		"Aggregates (by hash: up to 8192 groups of them) whose ingested messages this receiver gives up to Kafka, to be handled by the owner of their partition, because a copy of an earlier one given up here is not committed yet: the local-first ingest keeps an aggregate's order this way.", receiverLabels, nil)
	descIngestHeldAll = prometheus.NewDesc(Namespace+"_receiver_ingest_held_all",
		"1 from start until the group has committed past the ends the receiver's topics had at start, on every partition (copies an earlier process gave up may lie below them): meanwhile the ingested messages of aggregates on a partition not yet past its end are given up to Kafka (all of them until the ends are read). A quiet partition keeps it at 1 until its next record.", receiverLabels, nil)
	descBackoffDelay = prometheus.NewDesc(Namespace+"_receiver_backoff_seconds",
		"Current backoff delay between probes while backing off; 0 otherwise.", receiverLabels, nil)
)

type receiverEntry struct {
	dispatcher, context string
	src                 ReceiverSource
}

// receiverCollector reads every receiver's snapshot at scrape time.
type receiverCollector struct {
	mu      sync.Mutex // guards entries
	entries []receiverEntry
}

func newReceiverCollector() *receiverCollector { return &receiverCollector{} }

func (c *receiverCollector) add(dispatcher, context string, src ReceiverSource) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries = append(c.entries, receiverEntry{dispatcher, context, src})
}

func (c *receiverCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInFlight, descMaxInFlight, descPaused, descPausedPartitions, descAssigned, descJoined, descCommitLag, descLag, descKeyBacklog, descBackingOff, descBackoffDelay, descBuffered, descFetchMax, descParked, descParkedAge, descParkFull, descParkWaiting, descIngestHeld, descIngestHeldAll} {
		ch <- d
	}
}

func (c *receiverCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	entries := append([]receiverEntry(nil), c.entries...)
	c.mu.Unlock()
	for _, e := range entries {
		s := e.src.Snapshot()
		g := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, e.dispatcher, e.context)
		}
		g(descInFlight, float64(s.InFlight))
		g(descMaxInFlight, float64(s.MaxInFlight))
		g(descPaused, b2f(s.Paused))
		g(descPausedPartitions, float64(s.PausedPartitions))
		g(descAssigned, float64(s.AssignedPartitions))
		g(descJoined, b2f(s.Ready))
		g(descCommitLag, float64(s.CommitLag))
		g(descLag, float64(s.Lag))
		g(descKeyBacklog, float64(s.MaxKeyBacklog))
		g(descBackingOff, b2f(s.BackingOff))
		g(descBackoffDelay, s.BackoffDelay.Seconds())
		g(descBuffered, float64(s.BufferedBytes))
		g(descFetchMax, float64(s.FetchMaxBytes))
		g(descParked, float64(s.ParkedAggregates))
		g(descParkedAge, s.OldestParked.Seconds())
		g(descParkFull, b2f(s.ParkFull))
		g(descParkWaiting, float64(s.ParkWaiting))
		g(descIngestHeld, float64(s.IngestHeld))
		g(descIngestHeldAll, b2f(s.IngestHeldAll))
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// ExecutorSnapshot is the executor's state at one instant.
type ExecutorSnapshot struct {
	Workers         int
	Mailboxes       int64
	QueuedMailboxes int64
	Submitted       uint64
	Completed       uint64
	Failed          uint64
	BlockingRunning int64
	LongestTurn     float64 // seconds
}

// ExecutorSource gives the executor's snapshot; called at scrape time.
type ExecutorSource func() ExecutorSnapshot

var (
	descWorkers = prometheus.NewDesc(Namespace+"_executor_workers",
		"Workers of the shared executor.", nil, nil)
	descMailboxes = prometheus.NewDesc(Namespace+"_executor_mailboxes",
		"Mailboxes holding messages: aggregate IDs with work running or queued. Each worker publishes what its turns emptied every 64 turns and when idle, so a busy or stuck worker's last few turns may still count.", nil, nil)
	descQueued = prometheus.NewDesc(Namespace+"_executor_queued_mailboxes",
		"Mailboxes waiting in a worker's queue for their turn.", nil, nil)
	descTasks = prometheus.NewDesc(Namespace+"_executor_messages_total",
		"Messages through the executor (state: submitted; completed, or failed: ended without being handled, as dead-lettered, parked, discarded, unroutable or dropped). Completed and failed trail each busy worker by up to 63 of its turns.", []string{"state"}, nil)
	descBlocking = prometheus.NewDesc(Namespace+"_executor_blocking_running",
		"Messages of blocking handlers running on the blocking pool.", nil, nil)
	descLongest = prometheus.NewDesc(Namespace+"_executor_longest_turn_seconds",
		"Age of the oldest mailbox turn now running on a worker; grows when a handler blocks a worker.", nil, nil)
)

type executorCollector struct{ src ExecutorSource }

func (c *executorCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descWorkers, descMailboxes, descQueued, descTasks, descBlocking, descLongest} {
		ch <- d
	}
}

func (c *executorCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.src()
	ch <- prometheus.MustNewConstMetric(descWorkers, prometheus.GaugeValue, float64(s.Workers))
	ch <- prometheus.MustNewConstMetric(descMailboxes, prometheus.GaugeValue, float64(s.Mailboxes))
	ch <- prometheus.MustNewConstMetric(descQueued, prometheus.GaugeValue, float64(s.QueuedMailboxes))
	ch <- prometheus.MustNewConstMetric(descTasks, prometheus.CounterValue, float64(s.Submitted), "submitted")
	ch <- prometheus.MustNewConstMetric(descTasks, prometheus.CounterValue, float64(s.Completed), "completed")
	ch <- prometheus.MustNewConstMetric(descTasks, prometheus.CounterValue, float64(s.Failed), "failed")
	ch <- prometheus.MustNewConstMetric(descBlocking, prometheus.GaugeValue, float64(s.BlockingRunning))
	ch <- prometheus.MustNewConstMetric(descLongest, prometheus.GaugeValue, s.LongestTurn)
}
