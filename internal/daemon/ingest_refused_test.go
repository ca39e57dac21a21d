package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/zap/zaptest"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
	"github.com/wowd/wowd/internal/receiver"
	"github.com/wowd/wowd/internal/testwait"
)

// TestIngestHoldsAnAggregateFromARefusal: two dispatchers of the topic,
// alpha and beta (admitted in that order), windows of 2. beta's window is
// full (two other aggregates' messages its sink holds). The caller posts
// m0 of cart-1 and gives up after 500 ms: alpha admitted m0 (its sink takes
// 2 s with it), beta's Admit waited for room and is refused when the caller
// goes. The request carries on (once admitted, a message is published
// whatever the caller does), and m0's copy, unmarked for beta, goes to
// beta's partition owner once alpha is done. Until then, and until that
// copy is committed, beta must give the aggregate's next messages up to
// Kafka too: before the fix it learnt of the copy only at its publish, 2 s
// later, and handled the caller's m1 locally, ahead of m0.
func TestIngestHoldsAnAggregateFromARefusal(t *testing.T) {
	c := newCluster(t, kfake.SeedTopics(1, "wow.example.cart.event"))
	var (
		mu   sync.Mutex
		beta []string // cart-1's messages as beta's sink saw them: id@partition (-1: handled locally)
	)
	gate := make(chan struct{})
	var reg handler.Registry
	reg.Register(handler.Spec{Name: "alphat", New: func(any, handler.Deps) (handler.Handler, error) {
		var once sync.Once
		return handler.Sync(func(_ context.Context, m *handler.Message) error {
			if m.Wow.ID == "m0" {
				once.Do(func() { time.Sleep(2 * time.Second) })
			}
			return nil
		}), nil
	}})
	reg.Register(handler.Spec{Name: "betat", New: func(any, handler.Deps) (handler.Handler, error) {
		return handler.Sync(func(_ context.Context, m *handler.Message) error {
			if m.AggregateID != "cart-1" {
				<-gate
				return nil
			}
			mu.Lock()
			beta = append(beta, fmt.Sprintf("%s@%d", m.Wow.ID, m.Partition))
			mu.Unlock()
			return nil
		}), nil
	}})
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
  dispatch:
    max-in-flight: 2
  dispatchers:
    alpha:
      topics: [event]
      handler: {type: alphat}
    beta:
      topics: [event]
      handler: {type: betat}
  metrics:
    listen: 127.0.0.1:0
  ingest:
    enabled: true
`, c.ListenAddrs()[0]), "test.yaml", &reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := New(cfg, &reg, zaptest.NewLogger(t), "test")
	if err != nil {
		t.Fatal(err)
	}
	rt.Start(context.Background())
	defer stopRT(t, rt)
	openGate := sync.OnceFunc(func() { close(gate) })
	defer openGate() // before stopping, should the test end early
	var betaR *receiver.Receiver
	for _, r := range rt.receivers {
		if r.Dispatcher() == "beta" {
			betaR = r
		}
	}
	testwait.For(t, 20*time.Second, "ready, start barrier lifted", func() bool {
		ok, _ := rt.Ready()
		if !ok {
			return false
		}
		for _, r := range rt.receivers {
			if r.Snapshot().IngestHeldAll {
				return false
			}
		}
		return true
	})
	addr := rt.MetricsAddr()
	type answer struct {
		HandledBy []string `json:"handled_by"`
	}
	post := func(cl *http.Client, body []byte) (int, answer, error) {
		resp, err := cl.Post("http://"+addr+"/v1/messages/event", "application/json", bytes.NewReader(body))
		if err != nil {
			return 0, answer{}, err
		}
		defer resp.Body.Close()
		var a answer
		err = json.NewDecoder(resp.Body).Decode(&a)
		return resp.StatusCode, a, err
	}
	// Fill beta's window with two other aggregates' messages.
	var wg sync.WaitGroup
	for _, id := range []string{"x1", "x2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, _, err := post(http.DefaultClient, event(id, "cart-"+id, "")); err != nil || code != http.StatusAccepted {
				t.Errorf("%s: %d %v", id, code, err)
			}
		}()
	}
	testwait.For(t, 10*time.Second, "beta's window full", func() bool { return betaR.InFlight() == 2 })
	if _, _, err := post(&http.Client{Timeout: 500 * time.Millisecond}, event("m0", "cart-1", "")); err == nil {
		t.Fatal("m0 answered within 500 ms; the scenario needs beta's Admit to wait")
	}
	// The server sees the caller gone: beta's Admit is refused, while
	// alpha's sink still has m0 for more than a second.
	testwait.For(t, 1200*time.Millisecond, "beta holding cart-1 from its refusal, before m0's copy is published", func() bool { return betaR.Snapshot().IngestHeld > 0 })
	openGate() // beta's window frees up
	code, a, err := post(http.DefaultClient, event("m1", "cart-1", ""))
	if err != nil || code != http.StatusAccepted {
		t.Fatalf("m1: %d %v", code, err)
	}
	if slices.Contains(a.HandledBy, "beta") {
		t.Fatalf("m1 handled by %v: beta handled it locally while m0's copy waited for it in Kafka", a.HandledBy)
	}
	wg.Wait()
	testwait.For(t, 20*time.Second, "beta handled m0 and m1 from Kafka", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(beta) >= 2
	})
	mu.Lock()
	got := slices.Clone(beta)
	mu.Unlock()
	for _, s := range got {
		if s[len(s)-2:] == "-1" {
			t.Errorf("beta handled cart-1 as %v (id@partition, -1 = locally): a message handled locally while m0's copy was held", got)
		}
	}
}
