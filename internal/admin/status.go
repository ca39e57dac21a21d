package admin

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/wowd/wowd/internal/receiver"
)

// Source is what the admin API reads of the running daemon.
type Source interface {
	// Receivers returns every receiver's status with up to top hot and
	// oldest aggregates each (0: none).
	Receivers(top int) []receiver.Status
	// Executor returns the shared executor's figures.
	Executor() Executor
	// Outcomes returns a receiver's message counts since the start, by
	// outcome (the outcome label of wowd_messages_total).
	Outcomes(dispatcher, context string) map[string]float64
}

// DefaultTop and MaxTop bound the ?top= parameter: how many hot and oldest
// aggregates a status names.
const (
	DefaultTop = 10
	MaxTop     = 100
)

// Pause reasons of a partition (PartitionStatus.Paused); a partition may
// have several, joined by "+".
const (
	PauseNone        = "none"
	PauseWindowFull  = receiver.PausedWindowFull  // the receiver's window is full: every partition waits
	PauseSinkBackoff = receiver.PausedSinkBackoff // most handler attempts fail: every partition waits
	PauseSpanCap     = "span_cap"                 // one unfinished record holds the commit while later ones finished
	PauseShareCap    = "share_cap"                // the partition holds half the window and more of its messages wait while others go on
	PauseParkedCap   = receiver.PausedParkedCap   // max-parked aggregates parked: every partition waits for an unpark
	PauseParkedState = "parked_state"             // newly assigned: waits until its parked aggregates are read
	PauseRecordsHeld = receiver.PausedRecordsHeld // fetched records waiting for room fill the receiver's part of the memory budget, or reach twice its window: every partition waits
)

// backPressure reports whether a pause reason is back-pressure: a full
// window, or records waiting for room in it, judged by progress instead
// of by the time paused.
func backPressure(reason string) bool {
	return reason == PauseWindowFull || reason == PauseRecordsHeld
}

// Status is the answer of GET /admin/v1/status.
type Status struct {
	Instance      string           `json:"instance"`
	Service       string           `json:"service"`
	Version       string           `json:"version"`
	Started       time.Time        `json:"started"`
	UptimeSeconds float64          `json:"uptime_seconds"`
	Executor      Executor         `json:"executor"`
	Receivers     []ReceiverStatus `json:"receivers"`
	// Hot are the aggregates with the most unfinished messages, of every
	// receiver, most first.
	Hot []HotAggregate `json:"hot"`
	// Oldest are the aggregates whose oldest unfinished message is the
	// oldest, of every receiver, oldest first.
	Oldest []OldAggregate `json:"oldest"`
	Parked ParkedStatus   `json:"parked"`
}

// Executor is the shared executor: its workers and mailboxes.
type Executor struct {
	Workers         int   `json:"workers"`
	Busy            int   `json:"busy"`             // workers in a turn now
	Mailboxes       int64 `json:"mailboxes"`        // aggregates with unfinished messages
	QueuedMailboxes int64 `json:"queued_mailboxes"` // of those, waiting for a worker
}

// ReceiverStatus is one receiver: one dispatcher and bounded context, one
// consumer group member.
type ReceiverStatus struct {
	Dispatcher  string `json:"dispatcher"`
	Context     string `json:"context"`
	GroupID     string `json:"group_id"`
	MemberID    string `json:"member_id"`
	Generation  int32  `json:"generation"`
	Joined      bool   `json:"joined"`
	InFlight    int    `json:"in_flight"`
	MaxInFlight int    `json:"max_in_flight"`
	// Paused is why the receiver stopped fetching every partition:
	// none, window_full, sink_backoff, parked_cap or records_held.
	Paused         string  `json:"paused"`
	BackoffSeconds float64 `json:"backoff_seconds,omitempty"`
	// Parks says the dispatcher parks failed aggregates (on-failure:
	// park): an aggregate of it may be parked by hand. DeadLetters says
	// its dead letters are on: a skip or discard of one of its parked
	// aggregates needs them.
	Parks       bool `json:"parks"`
	DeadLetters bool `json:"dead_letters"`
	// Rates are messages per second by outcome over the last minute (or
	// since the start, when that is shorter); outcomes with none are left
	// out.
	Rates      map[string]float64 `json:"rates_per_second"`
	Partitions []PartitionStatus  `json:"partitions"`
}

// PartitionStatus is one partition the receiver owns.
type PartitionStatus struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Committed is the group's committed offset, -1 when none is known.
	Committed int64 `json:"committed"`
	// Finished is the offset after the longest finished prefix: what the
	// next commit sends; -1 before a message finished.
	Finished      int64 `json:"finished"`
	HighWatermark int64 `json:"high_watermark"` // as of the last fetch, -1 before one
	// Lag is HighWatermark − Committed: what a restart would deliver
	// again or for the first time. Before the group's first commit it counts
	// from the first offset delivered; -1 when unknown.
	Lag      int64 `json:"lag"`
	InFlight int64 `json:"in_flight"` // messages read and not finished
	// Waiting is the messages fetched that wait in wowd for room: in the
	// window, or in the partition's share of it.
	Waiting int64 `json:"waiting"`
	// Span is the messages read since the Finished offset, finished or not:
	// what a crash would deliver again.
	Span int `json:"uncommitted_span"`
	// Paused is why the partition is not fetched: none, or reasons joined
	// by "+" (window_full, sink_backoff, parked_cap, records_held,
	// span_cap, share_cap, parked_state).
	Paused string `json:"paused"`
	// PausedSeconds is how long the partition has been seen paused, in
	// consecutive observations (see SampleEvery); 0 when it is not. While
	// paused for another reason than back-pressure (window_full or
	// records_held) alone, it counts only the time paused for such reasons
	// (back-pressure before does not).
	PausedSeconds float64 `json:"paused_seconds"`
	// StalledSeconds is how long the partition has had messages to
	// finish (lag or in flight) without its Finished offset moving; 0 when
	// it moves or has nothing to do.
	StalledSeconds float64   `json:"stalled_seconds"`
	Since          time.Time `json:"assigned_since"`
}

// HotAggregate is an aggregate with unfinished messages.
type HotAggregate struct {
	Dispatcher string `json:"dispatcher"`
	Context    string `json:"context"`
	Aggregate  string `json:"aggregate"`
	ID         string `json:"id"`
	// IDBytes holds the ID, in base64, where it is not valid UTF-8: JSON
	// replaces such bytes in ID with U+FFFD, which would name another
	// aggregate (as the state topic's aggregate_bytes). Absent otherwise.
	IDBytes    []byte `json:"id_bytes,omitempty"`
	Unfinished int    `json:"unfinished"`
}

// OldAggregate is an aggregate and its oldest unfinished message.
type OldAggregate struct {
	Dispatcher string    `json:"dispatcher"`
	Context    string    `json:"context"`
	Aggregate  string    `json:"aggregate"`
	ID         string    `json:"id"`
	IDBytes    []byte    `json:"id_bytes,omitempty"` // as HotAggregate's
	Topic      string    `json:"topic"`
	Partition  int32     `json:"partition"`
	Offset     int64     `json:"offset"`
	Timestamp  time.Time `json:"timestamp"`   // the message's Kafka timestamp
	AgeSeconds float64   `json:"age_seconds"` // since Timestamp
}

// idBytes is an aggregate ID's IDBytes: its bytes where it is not valid
// UTF-8, else nil.
func idBytes(id string) []byte {
	if utf8.ValidString(id) {
		return nil
	}
	return []byte(id)
}

// status serves GET /admin/v1/status.
func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	top, err := topParam(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	st := s.snapshot(top)
	st.Parked = s.parked(r)
	s.log.Debug("admin status", zap.String("remote", r.RemoteAddr))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(st)
}

// topParam reads ?top=: 0 to MaxTop, DefaultTop when absent.
func topParam(r *http.Request) (int, error) {
	v := r.URL.Query().Get("top")
	if v == "" {
		return DefaultTop, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > MaxTop {
		return 0, &paramError{"top", v, "0 to " + strconv.Itoa(MaxTop)}
	}
	return n, nil
}

type paramError struct{ name, got, want string }

func (e *paramError) Error() string { return e.name + "=" + strconv.Quote(e.got) + ": want " + e.want }

// snapshot reads the source and folds it into a Status, recording the
// observation for rates and durations.
func (s *Server) snapshot(top int) Status {
	now := time.Now()
	recs := s.o.Source.Receivers(top)
	counts := make([]map[string]float64, len(recs))
	for i, rs := range recs {
		counts[i] = s.o.Source.Outcomes(rs.Dispatcher, rs.Context)
	}
	st := Status{
		Instance:      s.o.Instance,
		Service:       s.o.Service,
		Version:       s.o.Version,
		Started:       s.o.Started,
		UptimeSeconds: now.Sub(s.o.Started).Seconds(),
		Executor:      s.o.Source.Executor(),
		Receivers:     make([]ReceiverStatus, 0, len(recs)),
		Hot:           []HotAggregate{},
		Oldest:        []OldAggregate{},
	}
	for _, rs := range recs {
		out := ReceiverStatus{
			Dispatcher: rs.Dispatcher, Context: rs.Context, GroupID: rs.GroupID, MemberID: rs.MemberID,
			Generation: rs.Generation, Joined: rs.Joined, InFlight: rs.InFlight, MaxInFlight: rs.MaxInFlight,
			Paused: cmp.Or(rs.Paused, PauseNone), BackoffSeconds: rs.BackoffDelay.Seconds(),
			Parks: rs.Parks, DeadLetters: rs.DeadLetters,
			Partitions: make([]PartitionStatus, 0, len(rs.Partitions)),
		}
		for _, p := range rs.Partitions {
			ps := PartitionStatus{
				Topic: p.Topic, Partition: p.Partition, Committed: p.Committed, Finished: p.Watermark,
				HighWatermark: p.HighWatermark, Lag: -1, InFlight: p.Unfinished, Waiting: p.Waiting, Span: p.Span, Since: p.Since,
				Paused: pauseReasons(rs.Paused, p.Paused),
			}
			switch {
			case p.HighWatermark < 0:
			case p.Committed >= 0:
				ps.Lag = max(0, p.HighWatermark-p.Committed)
			case p.First >= 0:
				ps.Lag = max(0, p.HighWatermark-p.First) // nothing committed yet: from where the group started
			}
			out.Partitions = append(out.Partitions, ps)
		}
		for _, h := range rs.Hot {
			st.Hot = append(st.Hot, HotAggregate{Dispatcher: rs.Dispatcher, Context: rs.Context, Aggregate: h.Aggregate, ID: h.ID, IDBytes: idBytes(h.ID),
				Unfinished: h.Unfinished})
		}
		for _, o := range rs.Oldest {
			st.Oldest = append(st.Oldest, OldAggregate{Dispatcher: rs.Dispatcher, Context: rs.Context, Aggregate: o.Aggregate, ID: o.ID, IDBytes: idBytes(o.ID),
				Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, Timestamp: o.Timestamp, AgeSeconds: now.Sub(o.Timestamp).Seconds()})
		}
		st.Receivers = append(st.Receivers, out)
	}
	s.track.observe(now, st.Receivers, counts)
	slices.SortStableFunc(st.Hot, func(a, b HotAggregate) int { return cmp.Compare(b.Unfinished, a.Unfinished) })
	slices.SortStableFunc(st.Oldest, func(a, b OldAggregate) int { return a.Timestamp.Compare(b.Timestamp) })
	st.Hot, st.Oldest = st.Hot[:min(top, len(st.Hot))], st.Oldest[:min(top, len(st.Oldest))]
	return st
}

// pauseReasons joins the receiver's reason and the partition's own
// ("span", "share", "span+share").
func pauseReasons(receiverWide, own string) string {
	var rs []string
	if receiverWide != "" {
		rs = append(rs, receiverWide)
	}
	for r := range strings.SplitSeq(own, "+") {
		switch r {
		case "span":
			rs = append(rs, PauseSpanCap)
		case "share":
			rs = append(rs, PauseShareCap)
		case "parked-state":
			rs = append(rs, PauseParkedState)
		case "":
		default:
			rs = append(rs, r) // a reason added to the receiver later, as it names it
		}
	}
	if len(rs) == 0 {
		return PauseNone
	}
	return strings.Join(rs, "+")
}

// tracker remembers, across observations, the outcome counts of the last
// minute and each partition's progress, to derive rates and durations.
type tracker struct {
	mu      sync.Mutex // guards everything below
	samples []sample   // oldest first, the last rateWindow and one before
	parts   map[partKey]*progress
}

// rateWindow is the span of the outcome rates; sampleGap the least time
// between two kept samples.
const (
	rateWindow = time.Minute
	sampleGap  = time.Second
)

type sample struct {
	at     time.Time
	counts map[[2]string]map[string]float64 // by dispatcher, context
}

type partKey struct {
	dispatcher, context, topic string
	partition                  int32
	since                      time.Time // the incarnation
}

type progress struct {
	finished    int64
	movedAt     time.Time // when finished last moved, or the partition had nothing to do
	pausedSince time.Time // zero while not paused
	heldSince   time.Time // zero while not paused for another reason than a full window
	seen        bool      // in the current observation
}

func newTracker(start time.Time) *tracker {
	return &tracker{samples: []sample{{at: start}}, parts: make(map[partKey]*progress)}
}

// observe records one observation and fills in the rates and durations of
// rs.
func (t *tracker) observe(now time.Time, rs []ReceiverStatus, counts []map[string]float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := sample{at: now, counts: make(map[[2]string]map[string]float64, len(rs))}
	for i := range rs {
		cur.counts[[2]string{rs[i].Dispatcher, rs[i].Context}] = counts[i]
	}
	// The base of the rates: the oldest sample within the window.
	base := t.samples[len(t.samples)-1]
	for _, s := range t.samples {
		if now.Sub(s.at) <= rateWindow {
			base = s
			break
		}
	}
	for i := range rs {
		r := &rs[i]
		key := [2]string{r.Dispatcher, r.Context}
		r.Rates = map[string]float64{}
		if dt := now.Sub(base.at).Seconds(); dt > 0 {
			for o, n := range counts[i] {
				if d := n - base.counts[key][o]; d > 0 {
					r.Rates[o] = d / dt
				}
			}
		}
		for j := range r.Partitions {
			t.progress(now, r, &r.Partitions[j])
		}
	}
	for k, p := range t.parts {
		if !p.seen {
			delete(t.parts, k) // revoked
		}
		p.seen = false
	}
	// Keep the samples of the window, and one before it as the base of a
	// full minute; at most one a second, however often someone asks.
	if now.Sub(t.samples[len(t.samples)-1].at) >= sampleGap {
		t.samples = append(t.samples, cur)
	}
	for len(t.samples) > 2 && now.Sub(t.samples[1].at) >= rateWindow {
		t.samples = t.samples[1:]
	}
}

// progress updates and reports a partition's pause and stall durations.
// Called with t.mu held.
func (t *tracker) progress(now time.Time, r *ReceiverStatus, ps *PartitionStatus) {
	k := partKey{r.Dispatcher, r.Context, ps.Topic, ps.Partition, ps.Since}
	p := t.parts[k]
	if p == nil {
		p = &progress{finished: ps.Finished, movedAt: now}
		t.parts[k] = p
	}
	p.seen = true
	idle := ps.InFlight == 0 && (ps.Lag <= 0 || ps.Finished >= ps.HighWatermark)
	if ps.Finished != p.finished || idle {
		p.finished, p.movedAt = ps.Finished, now
	}
	ps.StalledSeconds = now.Sub(p.movedAt).Seconds()
	// A full window is back-pressure, judged by progress; time paused for
	// it does not count toward a pause for another reason (six minutes of
	// a full window then five seconds at the partition's share are five
	// seconds of share_cap). Other reasons count together: a partition
	// passed from one to another is held all along.
	switch {
	case ps.Paused == PauseNone:
		p.pausedSince, p.heldSince = time.Time{}, time.Time{}
	case backPressure(ps.Paused):
		p.heldSince = time.Time{}
	case p.heldSince.IsZero():
		p.heldSince = now
	}
	if ps.Paused != PauseNone && p.pausedSince.IsZero() {
		p.pausedSince = now
	}
	switch {
	case !p.heldSince.IsZero():
		ps.PausedSeconds = now.Sub(p.heldSince).Seconds()
	case !p.pausedSince.IsZero():
		ps.PausedSeconds = now.Sub(p.pausedSince).Seconds()
	}
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(struct {
		Error string `json:"error"`
	}{msg})
}

// Problems returns what makes st unhealthy for a probe, one line each: a
// partition without progress for stuckAfter or more while it has messages
// to finish, a partition paused for stuckAfter or more for another reason
// than a full window (back-pressure, judged by progress instead), and a
// receiver not in its group stuckAfter after the start.
func (st Status) Problems(stuckAfter time.Duration) []string {
	limit := stuckAfter.Seconds()
	var out []string
	for _, r := range st.Receivers {
		who := r.Dispatcher + "/" + r.Context
		if !r.Joined && st.UptimeSeconds >= limit {
			out = append(out, fmt.Sprintf("%s: not a member of consumer group %s", who, r.GroupID))
		}
		for _, p := range r.Partitions {
			at := fmt.Sprintf("%s %s/%d", who, p.Topic, p.Partition)
			if p.StalledSeconds >= limit {
				out = append(out, fmt.Sprintf("%s: no progress for %s (lag %d, in flight %d)", at, seconds(p.StalledSeconds), p.Lag, p.InFlight))
			}
			if p.Paused != PauseNone && !backPressure(p.Paused) && p.PausedSeconds >= limit {
				out = append(out, fmt.Sprintf("%s: paused (%s) for %s", at, p.Paused, seconds(p.PausedSeconds)))
			}
		}
	}
	return out
}
