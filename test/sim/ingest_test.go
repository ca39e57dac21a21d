package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"github.com/wowd/wowd/internal/ingest"
	"github.com/wowd/wowd/internal/receiver"
	"github.com/wowd/wowd/internal/wow"
)

// The local-first ingest, modeled by running it: each member has the real
// ingest endpoint (internal/ingest.Ingest) over its receiver, with a
// producer client of its own on the member's network, as the daemon
// builds it, and the simulation's callers POST Wow messages to it
// (ServeHTTP, without a listener). So the order of the calls (Admit, the
// wait for Done, the publish, marked as handled by the dispatcher when the
// local try finished, Published or NotPublished) is the ingest's own.
//
// What the model covers:
//
//   - callers: each ingest key is sent through one member at a time, as a
//     Wow service sends through its own sidecar; a caller sends a key's
//     next message only once the last one was answered, and moves on after
//     an error without retrying (that message's number is then a gap);
//   - a key passes to another member only once its member has stopped and
//     its requests were answered, and only to a member started after that
//     (one process after another: docs/operations.md, "Local-first
//     ingest: what the caller gets"); the start barrier keeps the order
//     there;
//   - mixed keys (in two thirds of the seeds): keys that also get records
//     produced straight to the topic, before any member starts and, later,
//     while no member has the key (between two of its sidecars), so that
//     ingested messages follow Kafka records of their aggregate;
//   - publishes that fail for good (a share of them, drawn per message:
//     the producer refuses them, as for a lost authorization), which the
//     ingest answers 502 after NotPublished, and 1% that panic (the caller
//     is told nothing; the ingest must still report "not published" to
//     the receivers); publishes retried by the
//     client across produce errors (injected NOT_LEADER answers), leader
//     moves and network cuts; a member's stop (Stop, the receivers' stop,
//     Drain, the producer's close) as the daemon orders it, and a crash
//     (the member cut off, its requests failing when its process ends);
//   - the copies in Kafka: a marked one is finished as soon as it is in
//     the log (the members skip it); an unmarked one must be handled like
//     any record, in its aggregate's order.
//
// What it does not cover: several receivers (dispatchers) per member, so a
// mark listing some of them, and Receiver.Published for a receiver that
// refused a message others took; the ingest's HTTP listener, token, rate
// limit, in-flight bound and size checks (tested in internal/ingest);
// callers that retry (a retry is a new message here); callers that send
// one aggregate through two members at once, which has no order.

// ingestKey is one aggregate sent through the ingest. Under world.mu.
type ingestKey struct {
	name  string
	mixed bool // also gets records produced straight to the topic
	next  int  // the next message's sequence number
	// owner is the member its caller sends through, nil while none does;
	// busy, a burst (or a direct produce) is under way on it.
	owner *member
	busy  bool
	// free is the tick at which it became free (its last owner ended with
	// its requests answered, or its direct records were acknowledged): only
	// a member started after it may take it.
	free uint64
	// gaveUp: its owner answered a message with an unmarked copy (given
	// up locally, handled from Kafka).
	gaveUp   bool
	hadOwner bool
}

// ingestModel is the run's ingest traffic. rng is used by the run's
// goroutine only; the rest is under world.mu.
type ingestModel struct {
	rng    *rand.Rand
	keys   []*ingestKey
	direct *kgo.Client // produces the mixed keys' records straight to the topic
	tick   uint64      // orders member starts and keys freed

	// For the summary and the checks.
	requests, accepted, marked, refused, failed, failedHandled int
	refusedPublish                                             int // publishes the producer refused for good
	panicked                                                   int // publishes that panicked (the caller's connection ends)
	directRecords, handoffs, handoffsGaveUp, produceFaults     int
	bursts, barrierBursts                                      int // bursts, and those sent while their member's start barrier stood
	active                                                     int // keys being sent or produced to now
	strays, strayHandled                                       int // copies published though the ingest answered 502
}

// publishRefusal is the producer's answer to a publish drawn to fail for
// good.
var publishRefusal = kerr.TopicAuthorizationFailed

// errPublishPanic is what a publish drawn to panic panics with.
var errPublishPanic = errors.New("sim: the publish panics")

// newIngestModel draws the run's ingest keys: 3 to 10, and in two thirds
// of the seeds as many mixed keys again, with 2 to 8 records each produced
// straight to the topic before any member starts.
func newIngestModel(t *testing.T, w *world, seed uint64) *ingestModel {
	in := &ingestModel{rng: rand.New(rand.NewPCG(seed, 6))}
	n := 3 + in.rng.IntN(8)
	for i := range n {
		in.keys = append(in.keys, &ingestKey{name: "ing-" + strconv.Itoa(i)})
	}
	if mix(seed, 94)%3 != 0 {
		for i := range n {
			in.keys = append(in.keys, &ingestKey{name: "mix-" + strconv.Itoa(i), mixed: true})
		}
	}
	// Produce faults injected while no one produces pile up (seed 9301
	// with stalls: 14 of them), and each costs a retrying producer a
	// metadata refresh, at most one per MetadataMinAge (5 s by default):
	// the direct producer took them all and ran past its minute.
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:9092"), kgo.Dialer(w.vn.DialContext),
		kgo.MetadataMinAge(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	in.direct = cl
	w.ing = in
	for _, k := range in.keys {
		if k.mixed {
			w.produceDirect(t, k, 2+in.rng.IntN(7))
		}
	}
	return in
}

// produceDirect produces n records of the free key k straight to the topic
// (the default partitioner, as the ingest's producer uses), and frees it
// again once they are acknowledged.
func (w *world) produceDirect(t *testing.T, k *ingestKey, n int) {
	w.mu.Lock()
	var recs []*kgo.Record
	for range n {
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(k.name), Value: w.value(k.name, k.next)})
		k.next++
	}
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res := w.ing.direct.ProduceSync(ctx, recs...)
	if err := res.FirstErr(); err != nil {
		t.Errorf("producing %s's records straight to the topic: %v", k.name, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, pr := range res {
		if pr.Err != nil {
			continue // not produced: the error is reported
		}
		r := pr.Record
		_, seq, _ := parseValue(r.Value)
		at := pos{r.Partition, r.Offset}
		w.ends[at.p] = max(w.ends[at.p], at.o+1)
		w.keyOf[at] = keySeq{k.name, seq}
		w.msgAt[keySeq{k.name, seq}] = at
		w.registeredLocked(at)
		w.ing.directRecords++
	}
	w.ing.tick++
	k.free = w.ing.tick
	if k.busy {
		k.busy = false
		w.ing.active--
	}
}

// ingestReceiver is a member's receiver as its ingest sees it, noting
// every admission for the checks.
type ingestReceiver struct {
	*receiver.Receiver
	w *world
	m *member
}

func (r ingestReceiver) Admit(ctx context.Context, rec *kgo.Record) (receiver.Admitted, error) {
	a, err := r.Receiver.Admit(ctx, rec)
	if err == nil {
		key, seq, _ := parseValue(rec.Value)
		r.w.mu.Lock()
		r.w.local = append(r.w.local, localRecord{r.w.localAt[keySeq{key, seq}], r.m.id, a})
		r.w.mu.Unlock()
	}
	return a, err
}

// ingestProducer is a member's ingest producer: its Kafka client, but a
// share of the messages, drawn per message, are refused for good.
type ingestProducer struct {
	cl *kgo.Client
	w  *world
}

func (p ingestProducer) ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	if len(rs) == 1 {
		key, seq, _ := parseValue(rs[0].Value)
		h := fnv.New64a()
		h.Write([]byte(key))
		switch d := mix(p.w.seed, 0x1e, h.Sum64(), uint64(seq)) % 100; {
		case d < 1:
			// A panic on the way to the publish (net/http recovers it in
			// the daemon and ends the caller's connection; ingestOne
			// here): the ingest must still tell its receivers that
			// nothing was published, or their holds never end.
			panic(errPublishPanic)
		case d < 5:
			p.w.mu.Lock()
			p.w.ing.refusedPublish++
			p.w.mu.Unlock()
			return kgo.ProduceResults{{Record: rs[0], Err: publishRefusal}}
		}
	}
	return p.cl.ProduceSync(ctx, rs...)
}

// startIngest gives m its ingest endpoint, as the daemon builds it: a
// producer client of its own (on the member's network) and the member's
// receiver. Called before its receiver starts: m's start tick orders it
// after every key freed so far.
func (w *world) startIngest(t *testing.T, m *member, log *zap.Logger) {
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:9092"), kgo.Dialer(m.net.dial),
		kgo.ClientID("sim-ingest-"+strconv.Itoa(m.id)))
	if err != nil {
		t.Fatal(err)
	}
	m.inCl = cl
	m.in = &ingest.Ingest{
		Service:     "sim",
		TopicPrefix: "wow.",
		Contexts:    map[string]wow.Context{"sim": {Alias: "sim", Aggregates: []string{"item"}}},
		Receivers:   []ingest.Receiver{ingestReceiver{m.r, w, m}},
		Producer:    ingestProducer{cl, w},
		Log:         log.Named("ingest").With(zap.Int("member", m.id)),
	}
	w.mu.Lock()
	w.ing.tick++
	m.startTick = w.ing.tick
	w.mu.Unlock()
}

// stopIngest is the ingest's part of m's stop, in the daemon's order:
// Stop before the receivers stop (stopIngestBefore), then Drain, for at
// least 2 s past the stop's deadline, and the producer's close.
func (m *member) stopIngestBefore() { m.in.Stop() }

func (m *member) stopIngestAfter(w *world, deadline time.Time) {
	wait := max(2*time.Second, time.Until(deadline))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	if err := m.in.Drain(ctx); err != nil {
		w.event("member %d: %v", m.id, err)
	}
	cancel()
	m.inCl.Close()
}

// releaseKeys frees the keys m had, once it ended (called as it ends, and
// as a burst on one of them ends). Under world.mu.
func (w *world) releaseKeysLocked(m *member) {
	select {
	case <-m.done:
	default:
		return
	}
	for _, k := range w.ing.keys {
		if k.owner == m && !k.busy {
			k.owner = nil
			w.ing.tick++
			k.free = w.ing.tick
		}
	}
}

// ingestBurst is the run's ingest action on member m, from the run's
// goroutine: n requests over some of the keys m may take (its own, and
// free ones freed before it started), each key's one after another,
// the keys at once. Free mixed keys may get records produced straight to
// the topic meanwhile, and a few produce requests fail (retried).
func (w *world) ingestBurst(t *testing.T, m *member, burst, n int) {
	in := w.ing
	if in.rng.IntN(4) == 0 {
		c := 1 + in.rng.IntN(3)
		w.event("the next %d produce requests to the topic fail with NOT_LEADER_FOR_PARTITION", c)
		w.mu.Lock()
		in.produceFaults++
		w.mu.Unlock()
		w.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.NotLeaderForPartition, Count: c})
	}
	order := in.rng.Perm(len(in.keys))
	direct := in.rng.IntN(3) == 0
	w.mu.Lock()
	var mine []*ingestKey
	for _, i := range order {
		k := in.keys[i]
		switch {
		case k.busy:
		case k.owner == m:
			mine = append(mine, k)
		case k.owner == nil && k.mixed && direct:
			// Between two sidecars of the key: records straight to the
			// topic. Only members started after them may take it.
			k.busy, direct = true, false
			in.active++
			w.bg.Go(func() { w.produceDirect(t, k, 1+int(mix(w.seed, uint64(burst), 5)%4)) })
		case k.owner == nil && m.startTick > k.free:
			mine = append(mine, k)
		}
	}
	mine = mine[:min(len(mine), max(1, n/3))]
	var names []string
	for _, k := range mine {
		if k.owner != m {
			if k.hadOwner {
				in.handoffs++
				if k.gaveUp {
					in.handoffsGaveUp++
				}
			}
			k.owner, k.hadOwner, k.gaveUp = m, true, false
		}
		k.busy = true
		in.active++
		names = append(names, k.name)
	}
	in.bursts++
	w.mu.Unlock()
	if len(mine) == 0 {
		w.event("member %d would take %d ingest requests (burst %d): no key it may take", m.id, n, burst)
		return
	}
	snap := m.r.Snapshot()
	w.event("member %d takes %d ingest requests (burst %d) over %v (start barrier standing: %v, %d buckets held)", m.id, n, burst, names, snap.IngestHeldAll, snap.IngestHeld)
	if snap.IngestHeldAll {
		w.mu.Lock()
		in.barrierBursts++
		w.mu.Unlock()
	}
	for i, k := range mine {
		c := n / len(mine)
		if i < n%len(mine) {
			c++
		}
		w.bg.Go(func() { w.sendKey(m, k, c) })
	}
}

// sendKey sends c messages of k through m, each once the last was
// answered, until one is not accepted.
func (w *world) sendKey(m *member, k *ingestKey, c int) {
	defer func() {
		w.mu.Lock()
		k.busy = false
		w.ing.active--
		w.releaseKeysLocked(m)
		w.mu.Unlock()
	}()
	for range c {
		w.mu.Lock()
		seq := k.next
		k.next++
		w.mu.Unlock()
		if !w.ingestOne(m, k, seq) {
			return
		}
	}
}

// ingestIdle reports whether no ingest request or direct produce is under
// way.
func (w *world) ingestIdle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ing.active == 0
}

// ingestBody is message seq of key as a Wow event stream: its id is
// key/seq (parseValue), its aggregate version seq+1; pad bytes of padding
// go inside its event's body.
func ingestBody(key string, seq, pad int) []byte {
	return fmt.Appendf(nil, `{"id":"%s/%d","contextName":"sim","aggregateName":"item","aggregateId":"%s","version":%d,"body":[{"name":"item_changed","body":{%s}}]}`,
		key, seq, key, seq+1, padding(pad))
}

// padding is pad bytes of padding as a JSON member, or nothing.
func padding(pad int) string {
	if pad <= 0 {
		return ""
	}
	return `"pad":"` + strings.Repeat("p", pad) + `"`
}

// ingestAnswer is what the ingest answers (its response, in part).
type ingestAnswer struct {
	Partition int32    `json:"partition"`
	Offset    int64    `json:"offset"`
	Admitted  int      `json:"admitted_by"`
	Handled   int      `json:"handled_locally"`
	Marked    bool     `json:"marked"`
	HandledBy []string `json:"handled_by"`
	Error     string   `json:"error"`
}

// ingestOne posts message seq of k to m's ingest and records what became
// of it; it reports whether it was accepted (202).
func (w *world) ingestOne(m *member, k *ingestKey, seq int) bool {
	ks := keySeq{k.name, seq}
	w.mu.Lock()
	local := pos{-1, w.nextLocal}
	w.nextLocal++
	w.localAt[ks] = local
	w.msgAt[ks] = local
	w.ing.requests++
	w.mu.Unlock()
	// The caller waits 5 s at most for room in the window (then it is
	// answered 503 and nothing is published); once admitted, the request
	// runs to its answer whatever the caller does.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, ingest.Path+"event", bytes.NewReader(ingestBody(k.name, seq, 0)))
	rec := httptest.NewRecorder()
	if serve(m.in, rec, req) {
		// The caller's connection ended: it was told nothing. What its
		// local record became (handled here, or given up and never
		// published) settles the message.
		w.mu.Lock()
		defer w.mu.Unlock()
		w.ing.panicked++
		w.gapLocked(ks)
		return false
	}
	var a ingestAnswer
	if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil {
		w.violate("member %d: the ingest's answer to %s #%d does not decode: %v: %q", m.id, k.name, seq, err, rec.Body.String())
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch rec.Code {
	case http.StatusAccepted:
		w.ing.accepted++
		at := pos{a.Partition, a.Offset}
		if a.Marked != (a.Handled > 0) || a.Admitted != 1 {
			w.violateLocked("member %d: %s #%d answered %+v: marked without a local finish, or the reverse", m.id, k.name, seq, a)
		}
		w.registerCopyLocked(at, ks, a.Marked)
		if !a.Marked {
			k.gaveUp = true
		}
		return true
	case http.StatusBadGateway: // admitted, then the publish failed
		w.ing.failed++
		if a.Handled > 0 {
			w.ing.failedHandled++ // handled here: not a gap
		} else {
			w.gapLocked(ks)
		}
	case http.StatusServiceUnavailable: // admitted nowhere: nothing handled, nothing published
		w.ing.refused++
		w.gapLocked(ks)
	default:
		w.violateLocked("member %d: the ingest answered %s #%d with %d: %s", m.id, k.name, seq, rec.Code, a.Error)
		w.gapLocked(ks)
	}
	return false
}

// serve runs the ingest's handler as net/http does, recovering the panic
// of a publish drawn to panic (ingestProducer); it reports whether it
// panicked.
func serve(h http.Handler, w http.ResponseWriter, r *http.Request) (panicked bool) {
	defer func() {
		if v := recover(); v != nil {
			if v != errPublishPanic {
				panic(v)
			}
			panicked = true
		}
	}()
	h.ServeHTTP(w, r)
	return false
}

// gapLocked records a message the ingest gave up for good: the caller
// was answered an error, and it was not handled here, nor published. It
// may never be handled; it counts as settled for its later messages.
func (w *world) gapLocked(ks keySeq) {
	w.gap[ks] = true
	if w.settledSeq[ks.key] == nil {
		w.settledSeq[ks.key] = map[int]bool{}
	}
	w.settledSeq[ks.key][ks.seq] = true
}

// registerCopyLocked records the copy of message ks the ingest published at
// at, marked or not. A marked copy is finished from the moment it is in the
// log: the members skip it.
func (w *world) registerCopyLocked(at pos, ks keySeq, marked bool) {
	if prev, ok := w.keyOf[at]; ok {
		if prev != ks {
			w.violateLocked("the ingest published %s #%d at %v, where %s #%d is", ks.key, ks.seq, at, prev.key, prev.seq)
		}
		return
	}
	w.keyOf[at] = ks
	w.msgAt[ks] = at
	w.ends[at.p] = max(w.ends[at.p], at.o+1)
	if marked {
		w.ing.marked++
		w.markedCopy[at] = true
		w.finishLocked(at)
		w.settled[at] = true
	}
	w.registeredLocked(at)
}

// reconcileTopic reads the whole topic once the run is over: every record
// must be known to the simulation, but a copy whose publish the ingest
// reported failed may be there all the same (its produce request reached
// the broker, its answer did not reach the producer in time). Such strays
// are registered, and counted.
func reconcileTopic(t *testing.T, w *world) {
	short := readToEnd(t, w, topic, func(r *kgo.Record) {
		w.mu.Lock()
		defer w.mu.Unlock()
		at := pos{r.Partition, r.Offset}
		if _, known := w.keyOf[at]; known {
			return
		}
		if _, poison := w.poi.recs[at]; poison {
			return
		}
		key, seq, ok := parseValue(r.Value)
		if !ok || len(r.Value) == 0 || r.Value[0] != '{' {
			w.violateLocked("the topic holds a record at %v the simulation never produced: key %q value %.60q", at, r.Key, r.Value)
			return
		}
		w.ing.strays++
		marked := false
		for _, h := range r.Headers {
			marked = marked || h.Key == receiver.HeaderHandledBy
		}
		w.eventLocked("a copy of %s #%d at %v (marked %v) whose publish the ingest answered with an error", key, seq, at, marked)
		w.registerCopyLocked(at, keySeq{key, seq}, marked)
	})
	for _, s := range short {
		w.violate("reading the topic back: %s", s)
	}
}

// ingestSummary is the ingest's part of a run's summary.
func (w *world) ingestSummaryLocked() string {
	in := w.ing
	mixed := 0
	for _, k := range in.keys {
		if k.mixed {
			mixed++
		}
	}
	return fmt.Sprintf("ingest: %d keys (%d mixed, %d records produced straight), %d requests: %d accepted (%d marked), %d refused at admission, %d publishes failed (%d refused for good by the sim, %d handled here), %d publishes panicked, %d strays (%d handled); %d key handoffs (%d after copies given up), %d bursts (%d while the start barrier stood), %d produce faults",
		len(in.keys), mixed, in.directRecords, in.requests, in.accepted, in.marked, in.refused, in.failed, in.refusedPublish, in.failedHandled, in.panicked,
		in.strays, in.strayHandled, in.handoffs, in.handoffsGaveUp, in.bursts, in.barrierBursts, in.produceFaults)
}
