package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
	"github.com/wowd/wowd/internal/receiver"
	"github.com/wowd/wowd/internal/wow"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is a handler that keeps what it was given, per dispatcher.
type recorder struct {
	mu  sync.Mutex
	got map[string][]handler.Message // by dispatcher
}

func (r *recorder) spec() handler.Spec {
	return handler.Spec{Name: "record", New: func(_ any, d handler.Deps) (handler.Handler, error) {
		return handler.Sync(func(_ context.Context, m *handler.Message) error {
			c := *m
			c.Value = slices.Clone(m.Value)
			if m.Wow != nil {
				w := *m.Wow
				w.Events = slices.Clone(w.Events)
				w.Header = slices.Clone(w.Header)
				c.Wow = &w
			}
			r.mu.Lock()
			r.got[d.Dispatcher] = append(r.got[d.Dispatcher], c)
			r.mu.Unlock()
			return nil
		}), nil
	}}
}

func (r *recorder) count(d string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got[d])
}

type fixture struct {
	File  string `json:"file"`
	Kind  string `json:"kind"`
	Error string `json:"error"`
	Key   string `json:"key"`
	Topic struct {
		Name      string `json:"name"`
		Aggregate string `json:"aggregate"`
	} `json:"topic"`
	Want struct {
		ID            string   `json:"id"`
		AggregateID   string   `json:"aggregateId"`
		AggregateName string   `json:"aggregateName"`
		ContextName   string   `json:"contextName"`
		Events        []string `json:"events"`
		Compensation  *struct {
			Context   string `json:"context"`
			Processor string `json:"processor"`
		} `json:"compensation"`
		Header [][]string `json:"header"`
	} `json:"want"`
}

func loadFixtures(t *testing.T) []fixture {
	t.Helper()
	data, err := os.ReadFile("../wow/testdata/records/manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	var fs []fixture
	if err := json.Unmarshal(data, &fs); err != nil {
		t.Fatal(err)
	}
	return fs
}

// TestWowRecordsEndToEnd runs the runtime on kfake with Wow records as Wow
// services write them: valid ones reach the handlers decoded, filters and
// the compensation rule pick who gets what, and records that do not decode
// or do not match their key and topic go to the dead-letter topic with the
// reason. It runs for a handler that reads the whole message and for one
// that reads only the routing fields (scanned, not decoded).
func TestWowRecordsEndToEnd(t *testing.T) {
	for _, routingOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("routing-only=%v", routingOnly), func(t *testing.T) { testWowRecordsEndToEnd(t, routingOnly) })
	}
}

func testWowRecordsEndToEnd(t *testing.T, routingOnly bool) {
	c := newCluster(t, kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(2))
	rec := &recorder{got: map[string][]handler.Message{}}
	var reg handler.Registry
	spec := rec.spec()
	spec.RoutingOnly = routingOnly
	reg.Register(spec)
	cfg, err := config.Parse(fmt.Appendf(nil, `
wow:
  service: projector
  kafka:
    bootstrap-servers: [%s]
    commit-interval: 100ms
  contexts:
    example-service:
      alias: example
      aggregates: [cart, order]
  dispatchers:
    everything:
      topics: [command, event, state]
      handler: {type: record}
    OrderProjector:
      topics: [state]
      handler: {type: record}
    cart-added:
      topics: [event]
      aggregates: [cart]
      events: [cart_item_added]
      handler: {type: record}
  metrics:
    listen: ""
`, c.ListenAddrs()[0]), "test.yaml", &reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The topics exist before the receivers subscribe.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, topic := range Topics(cfg) {
		if err := c.CreateTopic(topic, 2, nil); err != nil {
			t.Fatal(err)
		}
	}
	rt, err := New(cfg, &reg, zaptest.NewLogger(t), "test")
	if err != nil {
		t.Fatal(err)
	}
	rt.Start(context.Background())

	var (
		records                             []*kgo.Record
		everything, orderProjector, cartAdd int
		undecodable, mismatched             int
	)
	for _, f := range loadFixtures(t) {
		value, err := os.ReadFile(filepath.Join("../wow/testdata/records", f.File))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case f.Error != "":
			records = append(records, &kgo.Record{Topic: "wow.example.cart.event", Key: []byte("k"), Value: value})
			// The routing scan checks structure and the fields it reads,
			// not the rest: what it accepts fails the key check instead.
			var route wow.Route
			if routingOnly && route.Scan(wow.KindEvent, value, true) == nil {
				mismatched++
			} else {
				undecodable++
			}
			continue
		case !strings.HasPrefix(f.Topic.Name, "wow.example."):
			continue // other contexts: not subscribed
		}
		records = append(records, &kgo.Record{Topic: f.Topic.Name, Key: []byte(f.Key), Value: value})
		if f.Key != f.Want.AggregateID || f.Want.AggregateName != f.Topic.Aggregate {
			mismatched++
			continue
		}
		// A compensation goes only to the dispatcher it names, in the
		// message's context (or the service): the state fixture's names
		// OrderProjector of example-service, the event fixture's a Wow
		// saga no dispatcher here is.
		c := f.Want.Compensation
		forProjector := c != nil && c.Processor == "OrderProjector" && c.Context == f.Want.ContextName
		if c == nil {
			everything++
		}
		if f.Kind == "state" && (c == nil || forProjector) {
			orderProjector++ // its own compensation, and every plain state event
		}
		if c == nil && f.Kind == "event" && f.Topic.Aggregate == "cart" && slices.Contains(f.Want.Events, "cart_item_added") {
			cartAdd++
		}
	}
	records = append(records, &kgo.Record{Topic: "wow.example.cart.event", Value: []byte(`{}`)}) // no key: unroutable
	if err := cl.ProduceSync(context.Background(), records...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for rec.count("everything") < everything || rec.count("OrderProjector") < orderProjector || rec.count("cart-added") < cartAdd {
		if time.Now().After(deadline) {
			t.Fatalf("handled everything %d/%d, OrderProjector %d/%d, cart-added %d/%d", rec.count("everything"), everything,
				rec.count("OrderProjector"), orderProjector, rec.count("cart-added"), cartAdd)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Dead letters: every dispatcher reading the topic writes its own. Read
	// them before stopping: a record not fetched yet would never be.
	classes := map[string]int{}
	dl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeRegex(),
		kgo.ConsumeTopics(`.*\.dlq$`), kgo.ConsumeStartOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond),
		kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer dl.Close()
	enough := func() bool {
		return classes["undecodable"] >= undecodable && classes["mismatch"] >= mismatched && classes["unroutable"] >= 1
	}
	pctx, pcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer pcancel()
	for !enough() && pctx.Err() == nil {
		dl.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == receiver.HeaderErrorClass {
					classes[string(h.Value)]++
				}
			}
		})
	}
	if !enough() {
		t.Fatalf("dead letters by class %v; want at least %d undecodable, %d mismatch, 1 unroutable", classes, undecodable, mismatched)
	}
	time.Sleep(300 * time.Millisecond) // anything more would be a filter failure
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := rt.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if rec.count("everything") != everything || rec.count("OrderProjector") != orderProjector || rec.count("cart-added") != cartAdd {
		t.Fatalf("handled everything %d/%d, OrderProjector %d/%d, cart-added %d/%d", rec.count("everything"), everything,
			rec.count("OrderProjector"), orderProjector, rec.count("cart-added"), cartAdd)
	}
	for _, m := range rec.got["everything"] {
		if m.Wow == nil || m.Wow.AggregateID != m.AggregateID || m.Wow.ContextName != "example-service" || m.Wow.AggregateName == "" {
			t.Fatalf("message without its Wow routing fields: %+v", m.Wow)
		}
		if (m.Wow.ID == "") != routingOnly {
			t.Fatalf("routing-only %v, yet the message id is %q", routingOnly, m.Wow.ID)
		}
		if m.Kind == handler.KindCommand && m.Wow.Name == "" {
			t.Fatalf("command without its name: %+v", m.Wow)
		}
		if m.Kind != handler.KindCommand && len(m.Wow.Events) == 0 && !strings.Contains(string(m.Value), `"body":[]`) {
			t.Fatalf("event names missing: %+v", m.Wow)
		}
	}
	for _, m := range rec.got["cart-added"] {
		if !slices.Contains(m.Wow.Events, "cart_item_added") {
			t.Fatalf("cart-added got events %v", m.Wow.Events)
		}
	}
}

// newCluster starts a one-broker kfake cluster with opts (topics, configs),
// closed when the test and its cleanups (the runtimes on it) are done.
func newCluster(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}
