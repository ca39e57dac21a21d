package handlers

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wowd/wowd/internal/config"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/handlerconfig"
	"github.com/wowd/wowd/internal/testwait"
)

// newServer starts a test server on 127.0.0.1, closed at the end of the test
// (after the sinks built later in the test).
func newServer(t *testing.T, fn http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(fn)
	t.Cleanup(srv.Close)
	return srv
}

// arrivals records when a test server got each request.
type arrivals struct {
	mu sync.Mutex // guards at
	at []time.Time
}

// add records a request arriving now and returns how many arrived so far.
func (a *arrivals) add() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.at = append(a.at, time.Now())
	return len(a.at)
}

// times returns the arrival times so far.
func (a *arrivals) times() []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.at)
}

// hang reads the request body, so the server notices when the client gives
// up, and blocks until it does or release is closed.
func hang(r *http.Request, release <-chan struct{}) {
	_, _ = io.Copy(io.Discard, r.Body)
	select {
	case <-r.Context().Done():
	case <-release:
	}
}

// sinkConfig is the configuration of a sink posting to url with short
// backoffs, with over applied on top.
func sinkConfig(url string, over map[string]any) map[string]any {
	raw := map[string]any{"url": url, "backoff-initial": "1ms", "backoff-max": "5ms"}
	for k, v := range over {
		raw[k] = v
	}
	return raw
}

// retries is a handler.Observer recording retries.
type retries struct {
	mu  sync.Mutex // guards got
	got []retry
}

type retry struct {
	offset  int64
	attempt int
	err     error
	wait    time.Duration
}

func (r *retries) Retrying(m *handler.Message, attempt int, err error, wait time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, retry{m.Offset, attempt, err, wait})
}

func (r *retries) list() []retry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]retry(nil), r.got...)
}

func wantClass(t *testing.T, err error, want handler.Class) {
	t.Helper()
	if got, ok := handler.Classify(err); !ok || got != want {
		t.Fatalf("error %q is %v, want %v", err, got, want)
	}
}

func TestHTTPRequest(t *testing.T) {
	type request struct {
		method, path string
		header       http.Header
		body         string
	}
	got := make(chan request, 2)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h := r.Header.Clone()
		for _, k := range []string{"Content-Length", "User-Agent", "Accept-Encoding"} {
			h.Del(k)
		}
		got <- request{r.Method, r.URL.Path, h, string(body)}
		w.WriteHeader(http.StatusNoContent)
	})
	h := build(t, "http", sinkConfig(srv.URL+"/wow", map[string]any{
		"headers": map[string]any{"x-api-key": "k1", "authorization": "Bearer t"},
	}), handler.Deps{})
	acks := newAcks(t)

	m := testMessage(42)
	m.Timestamp = time.Date(2026, 8, 22, 13, 16, 3, 12_000_000, time.FixedZone("CET", 3600))
	m.Headers = []handler.Header{
		{Key: "trace_id", Value: []byte("abc")},
		{Key: "content-type", Value: []byte("application/avro")},
		{Key: "bad key", Value: []byte("skipped: not a token")},
		{Key: "x-ctl", Value: []byte("skipped\r\nx-injected: 1")},
		{Key: "ce-id", Value: []byte("cannot override")},
		{Key: "kafka-topic", Value: []byte("cannot override")},
	}
	h.Handle(context.Background(), m, acks.ack(42))
	if err := acks.wait(t, 42); err != nil {
		t.Fatalf("ack %v", err)
	}
	want := http.Header{}
	for k, v := range map[string]string{
		"Authorization":             "Bearer t",
		"X-Api-Key":                 "k1",
		"Content-Type":              "application/avro",
		"ce-specversion":            "1.0",
		"ce-id":                     "wow.example.cart.event-3-42",
		"ce-source":                 "wowd/cart-service/cart-projection",
		"ce-type":                   "wow.example.cart.event",
		"ce-subject":                "cart-1",
		"ce-time":                   "2026-08-22T12:16:03.012Z",
		"kafka-topic":               "wow.example.cart.event",
		"kafka-partition":           "3",
		"kafka-offset":              "42",
		"kafka-key":                 "cart-1",
		"kafka-header-trace_id":     "abc",
		"kafka-header-content-type": "application/avro",
		"kafka-header-ce-id":        "cannot override",
		"kafka-header-kafka-topic":  "cannot override",
		"wowd-attempt":              "1",
	} {
		want.Set(k, v)
	}
	r := <-got
	if r.method != http.MethodPost || r.path != "/wow" || r.body != `{"id":"e1"}` {
		t.Errorf("request %s %s %q", r.method, r.path, r.body)
	}
	if !reflect.DeepEqual(r.header, want) {
		t.Errorf("headers\n got %v\nwant %v", r.header, want)
	}

	// A key that is not UTF-8, no timestamp, no record headers, an aggregate ID to percent-encode.
	m = testMessage(43)
	m.Key = []byte{0xff, 0x00, 'a'}
	m.AggregateID = `a b%"é`
	m.Kind = handler.KindState
	h.Handle(context.Background(), m, acks.ack(43))
	if err := acks.wait(t, 43); err != nil {
		t.Fatalf("ack %v", err)
	}
	r = <-got
	for k, v := range map[string]string{
		"Content-Type":     "application/json",
		"kafka-key-base64": base64.StdEncoding.EncodeToString([]byte{0xff, 0x00, 'a'}),
		"kafka-key":        "",
		"ce-time":          "",
		"ce-subject":       "a%20b%25%22%C3%A9",
		"ce-type":          "wow.example.cart.state",
		"ce-id":            "wow.example.cart.event-3-43",
	} {
		if g := r.header.Get(k); g != v {
			t.Errorf("header %s = %q, want %q", k, g, v)
		}
	}

	// Messages taken in through the ingest (partition and offset -1): no
	// position headers, and a ce-id of their own each (an endpoint that
	// deduplicates by ce-id or position must not take one for another).
	ids := map[string]bool{}
	for i, v := range []string{`{"id":"local-1"}`, `{"id":"local-2"}`} {
		m = testMessage(int64(44 + i))
		m.Partition, m.Offset, m.Value = -1, -1, []byte(v)
		h.Handle(context.Background(), m, acks.ack(int64(44+i)))
		if err := acks.wait(t, int64(44+i)); err != nil {
			t.Fatalf("ack %v", err)
		}
		r = <-got
		for _, k := range []string{"kafka-partition", "kafka-offset"} {
			if g, ok := r.header[http.CanonicalHeaderKey(k)]; ok {
				t.Errorf("an ingested message with header %s %q, want none", k, g)
			}
		}
		id := r.header.Get("ce-id")
		if !strings.HasPrefix(id, "wow.example.cart.event-ingested-") || ids[id] {
			t.Errorf("an ingested message's ce-id %q: want wow.example.cart.event-ingested-<its value's hash>, one of its own", id)
		}
		ids[id] = true
	}
}

func TestHTTPPermanentStatus(t *testing.T) {
	var n atomic.Int32
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, strings.Repeat("z", 1000))
	})
	// A password and a token in the query: neither may show in the error,
	// which is logged and kept in the dead letter.
	url := "http://user:hunter2@" + strings.TrimPrefix(srv.URL, "http://") + "/x?token=tok-8c1e"
	h := build(t, "http", sinkConfig(url, nil), handler.Deps{})
	acks := newAcks(t)
	h.Handle(context.Background(), testMessage(1), acks.ack(1))
	err := acks.wait(t, 1)
	wantClass(t, err, handler.Permanent)
	msg := err.Error()
	if !strings.Contains(msg, "POST http://user:xxxxx@127.0.0.1:") || !strings.Contains(msg, "/x?token=******:") || !strings.Contains(msg, "status 404") {
		t.Errorf("error %q", msg)
	}
	if strings.Contains(msg, "hunter2") || strings.Contains(msg, "tok-8c1e") {
		t.Errorf("error %q shows the password or the query's token", msg)
	}
	if z := strings.Count(msg, "z"); z > maxErrorBody || z == 0 {
		t.Errorf("error quotes %d bytes of the body", z)
	}
	if got := n.Load(); got != 1 {
		t.Errorf("%d requests, want 1", got)
	}
}

func TestHTTPRedirects(t *testing.T) {
	var mu sync.Mutex // guards paths
	var paths []string
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		paths = append(paths, r.Method+" "+r.URL.Path+" "+string(body))
		mu.Unlock()
		switch r.URL.Path {
		case "/keep":
			http.Redirect(w, r, "/target", http.StatusPermanentRedirect)
		case "/lose":
			http.Redirect(w, r, "/target", http.StatusFound)
		}
	})
	acks := newAcks(t)
	build(t, "http", sinkConfig(srv.URL+"/keep", nil), handler.Deps{}).Handle(context.Background(), testMessage(1), acks.ack(1))
	if err := acks.wait(t, 1); err != nil {
		t.Fatalf("308: %v", err)
	}
	build(t, "http", sinkConfig(srv.URL+"/lose", nil), handler.Deps{}).Handle(context.Background(), testMessage(2), acks.ack(2))
	err := acks.wait(t, 2)
	wantClass(t, err, handler.Permanent)
	if !strings.Contains(err.Error(), "status 302") {
		t.Errorf("error %q", err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{`POST /keep {"id":"e1"}`, `POST /target {"id":"e1"}`, `POST /lose {"id":"e1"}`}
	if !reflect.DeepEqual(paths, want) {
		t.Errorf("requests %q, want %q", paths, want)
	}
}

func TestHTTPRetriesThenSucceeds(t *testing.T) {
	var mu sync.Mutex // guards attempts
	var attempts []string
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		attempts = append(attempts, r.Header.Get("wowd-attempt"))
		n := len(attempts)
		mu.Unlock()
		if n <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	obs := &retries{}
	h := build(t, "http", sinkConfig(srv.URL, nil), handler.Deps{Observer: obs})
	acks := newAcks(t)
	h.Handle(context.Background(), testMessage(5), acks.ack(5))
	if err := acks.wait(t, 5); err != nil {
		t.Fatalf("ack %v", err)
	}
	mu.Lock()
	if want := []string{"1", "2", "3"}; !reflect.DeepEqual(attempts, want) {
		t.Errorf("attempt headers %v, want %v", attempts, want)
	}
	mu.Unlock()
	got := obs.list()
	if len(got) != 2 || got[0].attempt != 1 || got[1].attempt != 2 || got[0].offset != 5 {
		t.Fatalf("retries %+v", got)
	}
	for _, r := range got {
		if !strings.Contains(r.err.Error(), "status 503") || r.wait <= 0 || r.wait > 5*time.Millisecond {
			t.Errorf("retry %+v", r)
		}
	}
}

func TestHTTPGivesUpAfterMaxAttempts(t *testing.T) {
	var n atomic.Int32
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	})
	obs := &retries{}
	h := build(t, "http", sinkConfig(srv.URL, map[string]any{"max-attempts": 3}), handler.Deps{Observer: obs})
	acks := newAcks(t)
	h.Handle(context.Background(), testMessage(1), acks.ack(1))
	err := acks.wait(t, 1)
	wantClass(t, err, handler.Transient)
	if !strings.Contains(err.Error(), "giving up after 3 attempts") || !strings.Contains(err.Error(), "status 500") {
		t.Errorf("error %q", err)
	}
	if got := n.Load(); got != 3 {
		t.Errorf("%d requests, want 3", got)
	}
	if got := len(obs.list()); got != 2 {
		t.Errorf("%d retries reported, want 2", got)
	}
}

// TestHTTPRetryAfterZeroKeepsBackoff: a target answering 503 with
// Retry-After: 0 (or a date in the past) is retried after the backoff, not
// at once: it made thousands of requests a second for one message.
func TestHTTPRetryAfterZeroKeepsBackoff(t *testing.T) {
	for _, ra := range []string{"0", "Wed, 21 Oct 2015 07:28:00 GMT"} {
		var arrived arrivals
		srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
			arrived.add()
			w.Header().Set("Retry-After", ra)
			w.WriteHeader(http.StatusServiceUnavailable)
		})
		h := build(t, "http", sinkConfig(srv.URL, map[string]any{"backoff-initial": "200ms", "backoff-max": "200ms", "max-attempts": 0}), handler.Deps{})
		ctx, cancel := context.WithCancel(context.Background())
		acks := newAcks(t)
		h.Handle(ctx, testMessage(1), acks.ack(1))
		time.Sleep(500 * time.Millisecond)
		cancel()
		if err := acks.wait(t, 1); err == nil {
			t.Fatalf("Retry-After %q: acknowledged as handled", ra)
		}
		// At 100-200ms per wait: 3 to 6 requests in 500ms.
		if n := len(arrived.times()); n > 6 || n < 2 {
			t.Errorf("Retry-After %q: %d requests in 500ms with a backoff of 100-200ms", ra, n)
		}
	}
}

func TestHTTPRetryAfter(t *testing.T) {
	var arrived arrivals
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if arrived.add() == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	obs := &retries{}
	h := build(t, "http", sinkConfig(srv.URL, nil), handler.Deps{Observer: obs})
	acks := newAcks(t)
	h.Handle(context.Background(), testMessage(1), acks.ack(1))
	if err := acks.wait(t, 1); err != nil {
		t.Fatalf("ack %v", err)
	}
	at := arrived.times()
	if len(at) != 2 {
		t.Fatalf("%d requests, want 2", len(at))
	}
	if gap := at[1].Sub(at[0]); gap < 950*time.Millisecond {
		t.Errorf("retried after %v despite Retry-After: 1 (backoff-max is 5ms)", gap)
	}
	if got := obs.list(); len(got) != 1 || got[0].wait != time.Second {
		t.Errorf("retries %+v, want one waiting 1s", got)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 8, 22, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"soon", 0, false},
		{"-1", 0, false},
		{"0", 0, true},
		{" 7 ", 7 * time.Second, true},
		{"86400", maxRetryAfter, true},
		{"Sat, 22 Aug 2026 12:01:30 GMT", 90 * time.Second, true},
		{"Saturday, 22-Aug-26 12:00:10 GMT", 10 * time.Second, true},
		{"Sat, 22 Aug 2026 11:59:00 GMT", 0, true},
		{"Sun, 23 Aug 2026 12:00:00 GMT", maxRetryAfter, true},
	} {
		got, ok := parseRetryAfter(tc.in, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestBackoff(t *testing.T) {
	p := retryPolicy(HTTPConfig{BackoffInitial: 100 * time.Millisecond, BackoffMax: time.Second}, nil)
	for _, tc := range []struct {
		attempt  int
		min, max time.Duration
	}{
		{1, 50 * time.Millisecond, 100 * time.Millisecond},
		{2, 100 * time.Millisecond, 200 * time.Millisecond},
		{4, 400 * time.Millisecond, 800 * time.Millisecond},
		{5, 500 * time.Millisecond, time.Second},
		{1 << 20, 500 * time.Millisecond, time.Second},
	} {
		for range 100 {
			if d := p.Backoff(tc.attempt); d < tc.min || d > tc.max {
				t.Fatalf("backoff(%d) = %v, want in [%v, %v]", tc.attempt, d, tc.min, tc.max)
			}
		}
	}
	p = retryPolicy(HTTPConfig{BackoffInitial: 100 * time.Millisecond, BackoffMax: math.MaxInt64}, nil)
	if d := p.Backoff(100); d < math.MaxInt64/2 {
		t.Fatalf("backoff with a huge cap = %v", d)
	}
}

func TestHTTPTimeoutIsRetried(t *testing.T) {
	var n atomic.Int32
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			hang(r, nil)
		}
	})
	obs := &retries{}
	// Long enough for the second attempt's new connection under -race on a
	// loaded machine; the first attempt waits it out whatever it is.
	h := build(t, "http", sinkConfig(srv.URL, map[string]any{"request-timeout": "1s"}), handler.Deps{Observer: obs})
	acks := newAcks(t)
	h.Handle(context.Background(), testMessage(1), acks.ack(1))
	if err := acks.wait(t, 1); err != nil {
		t.Fatalf("ack %v", err)
	}
	if got := n.Load(); got != 2 {
		t.Errorf("%d requests, want 2", got)
	}
	if got := obs.list(); len(got) != 1 || !strings.Contains(got[0].err.Error(), "timeout after 1s") {
		t.Errorf("retries %+v", got)
	}
}

func TestHTTPConnectionRefusedIsTransient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	obs := &retries{}
	h := build(t, "http", sinkConfig("http://"+addr+"/", map[string]any{"max-attempts": 2}), handler.Deps{Observer: obs})
	acks := newAcks(t)
	h.Handle(context.Background(), testMessage(1), acks.ack(1))
	err = acks.wait(t, 1)
	wantClass(t, err, handler.Transient)
	if !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), "POST http://"+addr) {
		t.Errorf("error %q", err)
	}
	if got := len(obs.list()); got != 1 {
		t.Errorf("%d retries, want 1", got)
	}
}

func TestHTTPCancel(t *testing.T) {
	// offset 1 fails and waits an hour to retry; offset 2 hangs in its request;
	// offset 3 is queued behind it (one request at a time).
	started := make(chan struct{}, 10)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		if r.Header.Get("kafka-offset") == "1" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		hang(r, nil)
	})
	obs := &retries{}
	h := build(t, "http", sinkConfig(srv.URL, map[string]any{
		"backoff-initial": "1h", "backoff-max": "1h", "max-concurrency": 1,
	}), handler.Deps{Observer: obs})
	acks := newAcks(t)
	cancels := map[int64]context.CancelFunc{}
	for off := int64(1); off <= 3; off++ {
		c, cancel := context.WithCancel(context.Background())
		defer cancel()
		cancels[off] = cancel
		h.Handle(c, testMessage(off), acks.ack(off))
		if off < 3 {
			<-started
		}
	}
	testwait.For(t, 10*time.Second, "the retry of offset 1", func() bool { return len(obs.list()) == 1 })
	for _, off := range []int64{1, 3, 2} { // waiting, queued, running
		cancels[off]()
		if err := acks.wait(t, off); !errors.Is(err, context.Canceled) {
			t.Errorf("offset %d: %v, want context.Canceled", off, err)
		}
	}

	// A canceled context is reported at once.
	c, cancel := context.WithCancel(context.Background())
	cancel()
	h.Handle(c, testMessage(4), acks.ack(4))
	if err := acks.wait(t, 4); !errors.Is(err, context.Canceled) {
		t.Errorf("offset 4: %v", err)
	}
}

func TestHTTPMaxConcurrency(t *testing.T) {
	var cur, peak atomic.Int32
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		n := cur.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(10 * time.Millisecond)
		cur.Add(-1)
	})
	h := build(t, "http", sinkConfig(srv.URL, map[string]any{"max-concurrency": 4}), handler.Deps{})
	acks := newAcks(t)
	for off := range int64(50) {
		h.Handle(context.Background(), testMessage(off), acks.ack(off))
	}
	for off := range int64(50) {
		if err := acks.wait(t, off); err != nil {
			t.Fatalf("offset %d: %v", off, err)
		}
	}
	if p := peak.Load(); p > 4 || p < 1 {
		t.Fatalf("%d requests in flight at once, want at most 4", p)
	}
}

func TestHTTPHandleDoesNotBlock(t *testing.T) {
	release := make(chan struct{})
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		hang(r, release)
	})
	h := build(t, "http", sinkConfig(srv.URL, map[string]any{"max-concurrency": 2}), handler.Deps{})
	acks := newAcks(t)
	const n = 1000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for off := range int64(n) {
			h.Handle(context.Background(), testMessage(off), acks.ack(off))
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("Handle blocked while the server was stalled")
	}
	close(release)
	for off := range int64(n) {
		if err := acks.wait(t, off); err != nil {
			t.Fatalf("offset %d: %v", off, err)
		}
	}
}

func TestHTTPCloseAcksOutstanding(t *testing.T) {
	var inHandler atomic.Int32
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("kafka-offset") == "0" {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		inHandler.Add(1)
		hang(r, nil)
	})
	obs := &retries{}
	spec, _ := handler.Default().Lookup("http")
	cfg, err := handlerconfig.Decode(spec, sinkConfig(srv.URL, map[string]any{
		"backoff-initial": "1h", "backoff-max": "1h", "max-concurrency": 2,
	}))
	if err != nil {
		t.Fatal(err)
	}
	h, err := spec.New(cfg, handler.Deps{Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	acks := newAcks(t)
	for off := range int64(10) {
		h.Handle(context.Background(), testMessage(off), acks.ack(off))
	}
	testwait.For(t, 10*time.Second, "a retry and two stalled requests", func() bool {
		return len(obs.list()) == 1 && inHandler.Load() == 2
	})

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = h.(handler.Closer).Close(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("close: %v, want the deadline exceeded", err)
	}
	for off := range int64(10) { // 0 waits to retry, 1 and 2 are in flight, the others queued
		if err := acks.wait(t, off); !errors.Is(err, context.Canceled) {
			t.Errorf("offset %d: %v, want context.Canceled", off, err)
		} else if !errors.Is(err, handler.ErrClosed) {
			t.Errorf("offset %d: %v, want handler.ErrClosed", off, err)
		}
	}
	h.Handle(context.Background(), testMessage(10), acks.ack(10))
	if err := acks.wait(t, 10); !errors.Is(err, context.Canceled) {
		t.Errorf("after close: %v", err)
	}
	if err := h.(handler.Closer).Close(context.Background()); err != nil {
		t.Errorf("second close: %v", err)
	}
}

func TestHTTPCloseLetsRequestsFinish(t *testing.T) {
	var inHandler atomic.Int32
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		inHandler.Add(1)
		time.Sleep(100 * time.Millisecond)
	})
	spec, _ := handler.Default().Lookup("http")
	cfg, err := handlerconfig.Decode(spec, sinkConfig(srv.URL, nil))
	if err != nil {
		t.Fatal(err)
	}
	h, err := spec.New(cfg, handler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	acks := newAcks(t)
	for off := range int64(3) {
		h.Handle(context.Background(), testMessage(off), acks.ack(off))
	}
	testwait.For(t, 10*time.Second, "three requests", func() bool { return inHandler.Load() == 3 })
	if err := h.(handler.Closer).Close(context.Background()); err != nil {
		t.Fatalf("close: %v", err)
	}
	for off := range int64(3) {
		if err := acks.wait(t, off); err != nil {
			t.Errorf("offset %d: %v", off, err)
		}
	}
}

// TestHTTPWowHeaders: a decoded Wow message gives its id as ce-id, a
// command's name as ce-type, its creation time as ce-time, and its routing
// fields, event names and header map as wow-* headers.
func TestHTTPWowHeaders(t *testing.T) {
	got := make(chan http.Header, 2)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.WriteHeader(http.StatusNoContent)
	})
	h := build(t, "http", sinkConfig(srv.URL, nil), handler.Deps{})
	acks := newAcks(t)
	created := time.Date(2025, 8, 22, 13, 16, 3, 12_000_000, time.UTC)
	for i, kind := range []handler.Kind{handler.KindCommand, handler.KindEvent} {
		m := testMessage(int64(i))
		m.Kind = kind
		m.Wow = &handler.Wow{ID: "0U7K2nR8", Name: "add_cart_item", ContextName: "example-service", AggregateName: "cart",
			AggregateID: m.AggregateID, TenantID: "(0)", RequestID: "r-1", CommandID: "c-1", Version: 3, HasVersion: true,
			CreateTime: created, Events: []string{"cart_item_added", "cart_checked"},
			Header: []handler.WowHeader{{Key: "trace_id", Value: "t-9"}, {Key: "local_first", Value: "true"}}}
		if kind == handler.KindEvent {
			m.Wow.Name = ""
		}
		h.Handle(context.Background(), m, acks.ack(int64(i)))
		if err := acks.wait(t, int64(i)); err != nil {
			t.Fatal(err)
		}
		hd := <-got
		wantType := "add_cart_item"
		if kind == handler.KindEvent {
			wantType = "wow." + m.Context + "." + m.Aggregate + ".event"
		}
		for k, v := range map[string]string{
			"ce-id": "0U7K2nR8", "ce-type": wantType, "ce-time": "2025-08-22T13:16:03.012Z", "ce-subject": m.AggregateID,
			"wow-context": "example-service", "wow-aggregate": "cart", "wow-tenant-id": "(0)", "wow-request-id": "r-1",
			"wow-command-id": "c-1", "wow-version": "3", "wow-events": "cart_item_added,cart_checked",
			"wow-header-trace_id": "t-9", "wow-header-local_first": "true",
		} {
			if hd.Get(k) != v {
				t.Errorf("%v: %s = %q, want %q", kind, k, hd.Get(k), v)
			}
		}
	}
}

// A request timeout that does not fit in the dispatcher's handler.timeout
// is refused when the sink is built: every slow request would fail its try.
func TestRequestTimeoutMustFitTheHandlerTimeout(t *testing.T) {
	spec, _ := handler.Default().Lookup("http")
	cfg, err := handlerconfig.Decode(spec, map[string]any{"url": "http://127.0.0.1:1/wow", "request-timeout": "30s"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := spec.New(cfg, handler.Deps{Timeout: 30 * time.Second}); err == nil ||
		!strings.Contains(err.Error(), "request-timeout: 30s must be less than the dispatcher's handler.timeout (30s)") {
		t.Fatalf("built with request-timeout = handler.timeout: %v", err)
	}
	h, err := spec.New(cfg, handler.Deps{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	_ = h.(handler.Closer).Close(context.Background())

	// wowd config validate finds it too, under the key's path.
	yaml := `wow:
  service: s
  kafka: {bootstrap-servers: ["127.0.0.1:9092"]}
  contexts: {example: {aggregates: [cart]}}
  dispatchers:
    cart:
      topics: [event]
      handler: {type: http, url: "http://127.0.0.1:1/wow", timeout: 20s, request-timeout: 30s}
`
	_, err = config.Parse([]byte(yaml), "t.yaml", handler.Default(), nil)
	if err == nil || !strings.Contains(err.Error(), "wow.dispatchers.cart.handler.request-timeout: 30s must be less than the dispatcher's handler.timeout (20s)") {
		t.Fatalf("validated with request-timeout > handler.timeout: %v", err)
	}
}

// proxyChild marks the child process of TestHTTPDialsThroughDeps.
const proxyChild = "WOWD_TEST_PROXY_CHILD"

// TestHTTPDialsThroughDeps: with handler.Deps.Dial set, the sink opens its
// connections with it, for the sink's own address. The URL's host does not
// resolve: only the given dialer, which connects to the test server
// whatever it is asked for, can deliver the message. The test runs again
// in a child process whose environment names a proxy (net/http reads the
// environment once per process): Dial must still be asked for the sink,
// not the proxy.
func TestHTTPDialsThroughDeps(t *testing.T) {
	if os.Getenv(proxyChild) == "" {
		t.Run("proxy in the environment", func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run", "^TestHTTPDialsThroughDeps$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), proxyChild+"=1", "HTTP_PROXY=http://proxy.invalid:3128", "http_proxy=", "NO_PROXY=", "no_proxy=")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("with HTTP_PROXY set: %v\n%s", err, out)
			}
			if !strings.Contains(string(out), "--- PASS: TestHTTPDialsThroughDeps") {
				t.Fatalf("the child process did not run the test:\n%s", out)
			}
		})
	}
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) })
	var dials atomic.Int32
	var asked atomic.Value
	dial := func(ctx context.Context, network, address string) (net.Conn, error) {
		dials.Add(1)
		asked.Store(address)
		var d net.Dialer
		return d.DialContext(ctx, network, srv.Listener.Addr().String())
	}
	h := build(t, "http", sinkConfig("http://sink.invalid:8080/", nil), handler.Deps{Dial: dial})
	acks := newAcks(t)
	h.Handle(context.Background(), testMessage(1), acks.ack(1))
	if err := acks.wait(t, 1); err != nil {
		t.Fatalf("the message failed: %v", err)
	}
	if dials.Load() == 0 || asked.Load() != "sink.invalid:8080" {
		t.Errorf("%d dials, asked for %v; want the sink's address through Deps.Dial", dials.Load(), asked.Load())
	}
}

// With h2c the sink connects directly, whatever proxy the environment
// names: a proxy would be sent the HTTP/2 preface, which it cannot
// forward. Without h2c the environment's proxy applies.
func TestHTTPH2CBypassesTheProxy(t *testing.T) {
	cfg := defaultHTTPConfig()
	cfg.URL = "http://sink.example:8080/"
	for _, h2c := range []bool{false, true} {
		cfg.H2C = h2c
		tr, err := newTransport(*cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if direct := tr.Proxy == nil; direct != h2c {
			t.Errorf("h2c %v: connects directly %v", h2c, direct)
		}
	}
}
