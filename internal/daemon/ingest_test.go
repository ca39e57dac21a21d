package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
	"github.com/wowd/wowd/internal/testwait"
)

// counter counts handled messages by Wow message id, over every instance.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) spec() handler.Spec { return c.named("count") }

// named is the counting handler type under another name.
func (c *counter) named(name string) handler.Spec {
	return handler.Spec{Name: name, New: func(any, handler.Deps) (handler.Handler, error) {
		return handler.Sync(func(_ context.Context, m *handler.Message) error {
			c.mu.Lock()
			c.n[m.Wow.ID]++
			c.mu.Unlock()
			return nil
		}), nil
	}}
}

func (c *counter) get(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[id]
}

func event(id, aggID string, header string) []byte {
	return fmt.Appendf(nil, `{"id":%q,"contextName":"example-service","aggregateName":"cart","header":{%s},"aggregateId":%q,`+
		`"tenantId":"(0)","ownerId":"","spaceId":"","commandId":"c-%s","requestId":"c-%s","version":1,`+
		`"body":[{"id":"e-%s","name":"cart_item_added","revision":"0.0.1","bodyType":"x.CartItemAdded","body":{"n":1}}],"createTime":1755868563012}`,
		id, header, aggID, id, id, id)
}

func startInstance(t *testing.T, c *kfake.Cluster, reg *handler.Registry) *Daemon {
	t.Helper()
	return startInstanceWith(t, c, reg, "")
}

// startInstanceWith starts an instance with more dispatchers, given as YAML
// entries of wow.dispatchers indented by four spaces.
func startInstanceWith(t *testing.T, c *kfake.Cluster, reg *handler.Registry, dispatchers string) *Daemon {
	t.Helper()
	rt := startUnready(t, c, reg, dispatchers)
	waitIngestReady(t, rt)
	return rt
}

// startUnready is startInstanceWith without the wait for readiness.
func startUnready(t *testing.T, c *kfake.Cluster, reg *handler.Registry, dispatchers string) *Daemon {
	t.Helper()
	rt := newInstance(t, c, reg, dispatchers)
	rt.Start(context.Background())
	return rt
}

// newInstance is startUnready without the start: a test may replace parts
// of it first.
func newInstance(t *testing.T, c *kfake.Cluster, reg *handler.Registry, dispatchers string) *Daemon {
	t.Helper()
	cfg, err := config.Parse(fmt.Appendf(nil, `
wow:
  service: carts
  kafka:
    bootstrap-servers: [%s]
    commit-interval: 100ms
    heartbeat-interval: 200ms
  contexts:
    example-service:
      alias: example
      aggregates: [cart]
  dispatchers:
    projection:
      topics: [event]
      handler: {type: count}
%s  metrics:
    listen: 127.0.0.1:0
  ingest:
    enabled: true
`, c.ListenAddrs()[0], dispatchers), "test.yaml", reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := New(cfg, reg, zaptest.NewLogger(t), "test")
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// waitIngestReady waits until rt is ready and its receivers' start
// barriers are lifted: until then every ingested message is given up
// locally and handled from its copy in Kafka, later (localhold.go), which
// a test counting local handlings must not race.
func waitIngestReady(t *testing.T, rt *Daemon) {
	t.Helper()
	testwait.For(t, 20*time.Second, "ready, start barriers lifted", func() bool {
		ok, _ := rt.Ready()
		for _, r := range rt.receivers {
			ok = ok && !r.Snapshot().IngestHeldAll
		}
		return ok
	})
}

func post(t *testing.T, addr string, body []byte) int {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/v1/messages/event", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func stopRT(t *testing.T, rt *Daemon) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := rt.Stop(ctx); err != nil {
		t.Error(err)
	}
}

// TestIngestHandledOnceLocallyFirst: messages handed to one instance's
// ingest are handled once, there, and not again when they come back through
// Kafka to it or to another instance of the same service; a record Wow
// itself marked local_first is handled; ingest while stopping is refused.
func TestIngestHandledOnceLocallyFirst(t *testing.T) {
	c := newCluster(t, kfake.SeedTopics(4, "wow.example.cart.event"), kfake.AllowAutoTopicCreation())
	cnt := &counter{n: map[string]int{}}
	var reg handler.Registry
	reg.Register(cnt.spec())
	a := startInstance(t, c, &reg)
	b := startInstance(t, c, &reg)
	// Both own partitions before anything is sent.
	deadline := time.Now().Add(20 * time.Second)
	for a.receivers[0].Snapshot().AssignedPartitions == 0 || b.receivers[0].Snapshot().AssignedPartitions == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the two instances did not share the partitions")
		}
		time.Sleep(20 * time.Millisecond)
	}

	const n = 40
	for i := range n {
		if code := post(t, a.MetricsAddr(), event(fmt.Sprintf("m%d", i), fmt.Sprintf("cart-%d", i), `"trace_id":"t"`)); code != http.StatusAccepted {
			t.Fatalf("ingest answered %d", code)
		}
	}
	// A record a Wow service marked local_first (no wowd marker) is handled.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "wow.example.cart.event", Key: []byte("cart-x"),
		Value: event("wow-marked", "cart-x", `"local_first":"true"`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(20 * time.Second)
	for cnt.get("wow-marked") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the Wow-marked record was not handled")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Wait for every ingested copy to come back through Kafka and be
	// acknowledged as local, and for the receivers to have finished all they
	// read. (Lag alone cannot say so: a partition not fetched yet has none.)
	deadline = time.Now().Add(20 * time.Second)
	for {
		sa, sb := a.receivers[0].Snapshot(), b.receivers[0].Snapshot()
		if localCount(t, a)+localCount(t, b) >= n && sa.InFlight == 0 && sb.InFlight == 0 && sa.CommitLag == 0 && sb.CommitLag == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("receivers did not catch up: %v copies acknowledged as local of %d; %+v %+v", localCount(t, a)+localCount(t, b), n, sa, sb)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i := range n {
		if got := cnt.get(fmt.Sprintf("m%d", i)); got != 1 {
			t.Fatalf("ingested message m%d handled %d times, want once", i, got)
		}
	}
	// The returning copies were acknowledged as local by both instances:
	// each owns some of the partitions they came back on.
	if la, lb := localCount(t, a), localCount(t, b); la == 0 || lb == 0 || la+lb != n {
		t.Fatalf("copies acknowledged as local: %v on a, %v on b, want %d in all, some on each", la, lb, n)
	}

	// Stopping: the ingest refuses with 503 and Retry-After. Messages it
	// still accepted meanwhile (each its own) are handled once each.
	done := make(chan struct{})
	go func() { stopRT(t, a); close(done) }()
	deadline = time.Now().Add(10 * time.Second)
	var late []string
	for i := 0; ; i++ {
		id := fmt.Sprintf("late-%d", i)
		resp, err := http.Post("http://"+a.MetricsAddr()+"/v1/messages/event", "application/json",
			bytes.NewReader(event(id, "cart-late", "")))
		if err != nil {
			break // already closed: refused too
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusAccepted {
			late = append(late, id)
		}
		if resp.StatusCode == http.StatusServiceUnavailable {
			if resp.Header.Get("Retry-After") == "" {
				t.Error("503 without Retry-After")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ingest still answering %d while stopping", resp.StatusCode)
		}
	}
	<-done
	stopRT(t, b)
	for _, id := range late {
		if got := cnt.get(id); got > 1 {
			t.Fatalf("%s, accepted while stopping, was handled %d times", id, got)
		}
	}
}

func localCount(t *testing.T, rt *Daemon) float64 {
	t.Helper()
	mfs, err := rt.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "wowd_messages_total" {
			continue
		}
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == "outcome" && l.GetValue() == "local" {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// TestIngestNeverMarksWhatWasNotHandled: an ingested message is published
// only once its local handling ended, and marked as handled only by the
// dispatchers that finished it. Here the instance stops while one
// dispatcher's handler still holds the message and the other's finished
// it: the copy lists only the one that finished, and another instance of
// the service handles it from Kafka on the other dispatcher only. Nothing
// is lost and nothing finished is handled twice.
func TestIngestNeverMarksWhatWasNotHandled(t *testing.T) {
	const topic = "wow.example.cart.event"
	const audit = "    audit:\n      topics: [event]\n      handler: {type: audit}\n"
	c := newCluster(t, kfake.SeedTopics(1, topic), kfake.AllowAutoTopicCreation())
	started := make(chan struct{}, 1)
	audited := &counter{n: map[string]int{}}
	var holding handler.Registry
	holding.Register(handler.Spec{Name: "count", New: func(any, handler.Deps) (handler.Handler, error) {
		return handler.Sync(func(ctx context.Context, m *handler.Message) error {
			started <- struct{}{}
			<-ctx.Done() // holds the message until the partition or the receiver goes
			return ctx.Err()
		}), nil
	}})
	holding.Register(audited.named("audit"))
	a := startInstanceWith(t, c, &holding, audit)

	type answer struct {
		code int
		body map[string]any
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := http.Post("http://"+a.MetricsAddr()+"/v1/messages/event", "application/json",
			bytes.NewReader(event("held", "cart-held", "")))
		if err != nil {
			answered <- answer{code: -1}
			return
		}
		defer resp.Body.Close()
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		answered <- answer{resp.StatusCode, body}
	}()
	<-started
	testwait.For(t, 10*time.Second, "the audit dispatcher handles the message locally", func() bool { return audited.get("held") == 1 })
	if n := endOffset(t, c, topic); n != 0 {
		t.Fatalf("%d records on %s while the message is still being handled locally: published too early", n, topic)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_ = a.Stop(ctx) // the deadline passes with the message unfinished
	got := <-answered
	if got.code != http.StatusAccepted || got.body["marked"] != true || got.body["handled_locally"] != float64(1) ||
		fmt.Sprint(got.body["handled_by"]) != "[audit]" {
		t.Fatalf("ingest answered %d %v, want 202, published marked as handled by audit only", got.code, got.body)
	}
	recs := topicRecords(t, c, topic, 1)
	if len(recs) != 1 {
		t.Fatalf("%d records on %s, want the copy", len(recs), topic)
	}
	marks := map[string]string{}
	for _, h := range recs[0].Headers {
		marks[h.Key] = string(h.Value)
	}
	if marks["wowd-handled-by"] != "carts" || marks["wowd-handled-dispatchers"] != "audit" {
		t.Fatalf("the copy is marked %v, want handled by carts' audit dispatcher only", marks)
	}

	cnt := &counter{n: map[string]int{}}
	var counting handler.Registry
	counting.Register(cnt.spec())
	counting.Register(audited.named("audit"))
	b := startInstanceWith(t, c, &counting, audit)
	testwait.For(t, 20*time.Second, "the other instance handles the message on the dispatcher that had not finished it", func() bool {
		return cnt.get("held") == 1
	})
	// The audit receiver of b reads the copy too: it finishes it (commits
	// past it) without handling it again.
	testwait.For(t, 20*time.Second, "the audit receiver commits past the copy", func() bool {
		for _, r := range b.receivers {
			if r.Dispatcher() == "audit" {
				ps := r.Partitions()
				return len(ps) == 1 && ps[0].Committed == 1
			}
		}
		return false
	})
	if n := audited.get("held"); n != 1 {
		t.Fatalf("the audit dispatcher handled the message %d times, want once (locally)", n)
	}
	stopRT(t, b)
}

// endOffset returns the end offset of partition 0 of topic.
func endOffset(t *testing.T, c *kfake.Cluster, topic string) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := ends.Lookup(topic, 0)
	return o.Offset
}

// topicRecords reads want records of topic from the start.
func topicRecords(t *testing.T, c *kfake.Cluster, topic string, want int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeStartOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < want && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}
