package ingest

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/wowd/wowd/internal/metrics"
	"github.com/wowd/wowd/internal/wow"
)

// producer publishes by recording; with block set, each publish waits for
// a value on it, after saying so on entered.
type producer struct {
	mu      sync.Mutex // guards n and values
	n       int
	values  [][]byte // of the records published, in order
	block   chan struct{}
	entered chan struct{}
}

func (p *producer) ProduceSync(_ context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	if p.block != nil {
		p.entered <- struct{}{}
		<-p.block
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	p.values = append(p.values, rs[0].Value)
	rs[0].Offset = int64(p.n - 1)
	return kgo.ProduceResults{{Record: rs[0]}}
}

func (p *producer) published() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

const message = `{"id":"m-1","contextName":"example-service","aggregateName":"cart","header":{},"aggregateId":"cart-1",` +
	`"tenantId":"(0)","ownerId":"","spaceId":"","commandId":"c-1","requestId":"c-1","version":1,` +
	`"body":[{"id":"e-1","name":"cart_item_added","revision":"0.0.1","bodyType":"x.CartItemAdded","body":{"n":1}}],"createTime":1755868563012}`

// newIngest is an endpoint with no receivers (a message is published
// straight away) counting into a registry of its own.
func newIngest(p *producer) (*Ingest, *metrics.Metrics) {
	m := metrics.New("test")
	return &Ingest{
		Service:     "carts",
		TopicPrefix: "wow.",
		Contexts:    map[string]wow.Context{"example-service": {Alias: "example", Aggregates: []string{"cart"}}},
		Producer:    p,
		Log:         zap.NewNop(),
		Metrics:     m.Ingest(),
	}, m
}

func send(in *Ingest, body []byte) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	in.ServeHTTP(w, httptest.NewRequest(http.MethodPost, Path+"event", bytes.NewReader(body)))
	return w
}

// counted returns wowd_ingest_requests_total{outcome}.
func counted(t *testing.T, m *metrics.Metrics, outcome string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "wowd_ingest_requests_total" {
			continue
		}
		for _, s := range mf.Metric {
			if s.Label[0].GetValue() == outcome {
				return s.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestBodyTooLarge: a body over MaxBody is answered 413, counted as
// too_large, and not published.
func TestBodyTooLarge(t *testing.T) {
	p := &producer{}
	in, m := newIngest(p)
	w := send(in, bytes.Repeat([]byte(" "), MaxBody+1))
	if w.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("answered %d, want 413", w.Code)
	}
	if w := send(in, []byte(message)); w.Code != http.StatusAccepted {
		t.Fatalf("a message of normal size: %d %s", w.Code, w.Body)
	}
	if p.published() != 1 || counted(t, m, "too_large") != 1 || counted(t, m, "accepted") != 1 {
		t.Errorf("published %d, too_large %v, accepted %v; want 1, 1, 1",
			p.published(), counted(t, m, "too_large"), counted(t, m, "accepted"))
	}
}

// TestRateLimit: past the burst, requests are answered 429 with a
// Retry-After of whole seconds, counted as rate_limited and not published;
// refused requests take nothing from the limit, and it refills at its
// rate.
func TestRateLimit(t *testing.T) {
	p := &producer{}
	in, m := newIngest(p)
	in.Rate = rate.NewLimiter(2, 2) // 2/s, 2 at once
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	clock := t0
	in.now = func() time.Time { return clock }

	for i := range 2 {
		if w := send(in, []byte(message)); w.Code != http.StatusAccepted {
			t.Fatalf("request %d within the burst: %d %s", i, w.Code, w.Body)
		}
	}
	for i := range 5 {
		w := send(in, []byte(message))
		if w.Code != http.StatusTooManyRequests {
			t.Fatalf("request %d past the burst: %d, want 429", i, w.Code)
		}
		if ra := w.Header().Get("Retry-After"); ra != "1" {
			t.Errorf("Retry-After %q, want 1 (500ms rounded up)", ra)
		}
		if !strings.Contains(w.Body.String(), "wow.ingest.rate-limit") {
			t.Errorf("the answer does not name the limit: %s", w.Body)
		}
	}
	// Half a second later one token is back: had the refusals taken
	// tokens, this would be refused too.
	clock = t0.Add(500 * time.Millisecond)
	if w := send(in, []byte(message)); w.Code != http.StatusAccepted {
		t.Fatalf("after the refill: %d %s", w.Code, w.Body)
	}
	if w := send(in, []byte(message)); w.Code != http.StatusTooManyRequests {
		t.Fatalf("past the refill: %d, want 429", w.Code)
	}
	if p.published() != 3 || counted(t, m, "rate_limited") != 6 || counted(t, m, "accepted") != 3 {
		t.Errorf("published %d, rate_limited %v, accepted %v; want 3, 6, 3",
			p.published(), counted(t, m, "rate_limited"), counted(t, m, "accepted"))
	}
}

// TestUnknownKindTakesNothingFromTheRateLimit: a request to an unknown
// kind is answered 404 and publishes nothing, so it takes no token from
// the messages that do (found by review: ten of them left a valid message
// answered 429).
func TestUnknownKindTakesNothingFromTheRateLimit(t *testing.T) {
	p := &producer{}
	in, _ := newIngest(p)
	in.Rate = rate.NewLimiter(1, 1)
	clock := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	in.now = func() time.Time { return clock }
	for range 10 {
		w := httptest.NewRecorder()
		in.ServeHTTP(w, httptest.NewRequest(http.MethodPost, Path+"bogus", bytes.NewReader([]byte(message))))
		if w.Code != http.StatusNotFound {
			t.Fatalf("POST %sbogus: %d, want 404", Path, w.Code)
		}
	}
	if w := send(in, []byte(message)); w.Code != http.StatusAccepted {
		t.Fatalf("a message after ten requests to an unknown kind: %d %s, want 202", w.Code, w.Body)
	}
}

// TestBusyRefusalsTakeNothingFromTheRateLimit: a request refused because
// max-in-flight requests are under way (503) publishes nothing, so it takes
// no token from the rate limit: the refusals are all 503 (not 429 once the
// burst is spent), and the next request once room is back is taken.
// Raised by review.
func TestBusyRefusalsTakeNothingFromTheRateLimit(t *testing.T) {
	p := &producer{block: make(chan struct{}), entered: make(chan struct{})}
	in, _ := newIngest(p)
	in.MaxInFlight = 1
	in.Rate = rate.NewLimiter(1, 2)
	clock := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	in.now = func() time.Time { return clock }

	first := make(chan int, 1)
	go func() { first <- send(in, []byte(message)).Code }()
	<-p.entered
	for i := range 5 {
		if w := send(in, []byte(message)); w.Code != http.StatusServiceUnavailable {
			t.Fatalf("request %d past max-in-flight: %d %s, want 503", i, w.Code, w.Body)
		}
	}
	p.block <- struct{}{}
	if code := <-first; code != http.StatusAccepted {
		t.Fatalf("the request under way: %d, want 202", code)
	}
	go func() { <-p.entered; p.block <- struct{}{} }()
	if w := send(in, []byte(message)); w.Code != http.StatusAccepted {
		t.Fatalf("the second message of a burst of 2, after five busy refusals: %d %s, want 202", w.Code, w.Body)
	}
}

// TestMaxInFlight: with max-in-flight requests under way, another is
// answered 503 with Retry-After, counted as busy, and not published; once
// one finishes, the next is taken.
func TestMaxInFlight(t *testing.T) {
	p := &producer{block: make(chan struct{}), entered: make(chan struct{})}
	in, m := newIngest(p)
	in.MaxInFlight = 1

	first := make(chan int, 1)
	go func() { first <- send(in, []byte(message)).Code }() // ends when p.block is fed
	<-p.entered                                             // the first request is under way

	w := send(in, []byte(message))
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" {
		t.Errorf("a request past max-in-flight: %d, Retry-After %q; want 503, 1", w.Code, w.Header().Get("Retry-After"))
	}
	if !strings.Contains(w.Body.String(), "wow.ingest.max-in-flight") {
		t.Errorf("the answer does not name the bound: %s", w.Body)
	}
	p.block <- struct{}{}
	if code := <-first; code != http.StatusAccepted {
		t.Fatalf("the request under way: %d, want 202", code)
	}
	go func() { <-p.entered; p.block <- struct{}{} }() // ends with the next publish
	if w := send(in, []byte(message)); w.Code != http.StatusAccepted {
		t.Fatalf("once the first finished: %d %s", w.Code, w.Body)
	}
	if p.published() != 2 || counted(t, m, "busy") != 1 || counted(t, m, "unavailable") != 0 {
		t.Errorf("published %d, busy %v, unavailable %v; want 2, 1, 0",
			p.published(), counted(t, m, "busy"), counted(t, m, "unavailable"))
	}
}
