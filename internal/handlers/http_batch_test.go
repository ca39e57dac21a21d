package handlers

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/executor"
	"github.com/wowd/wowd/internal/handlerconfig"
	"github.com/wowd/wowd/internal/tracing"
)

// batchEvent is what a test server reads of one CloudEvent of a batch.
type batchEvent struct {
	ID      string `json:"id"`
	Subject string `json:"subject"`
	Offset  string `json:"kafkaoffset"`
	Attempt string `json:"wowdattempt"`
}

func (e batchEvent) offset(t *testing.T) int64 {
	t.Helper()
	off, err := strconv.ParseInt(e.Offset, 10, 64)
	if err != nil {
		t.Errorf("event %s: kafkaoffset %q", e.ID, e.Offset)
	}
	return off
}

// batchRequest is one batch a test server got.
type batchRequest struct {
	at     time.Time
	size   int // bytes of the body
	events []batchEvent
}

// batchServer is a test server on 127.0.0.1 reading CloudEvents batches;
// respond writes the response to the n-th (0-based) request.
type batchServer struct {
	t       *testing.T
	url     string
	respond func(w http.ResponseWriter, n int, events []batchEvent)

	mu   sync.Mutex // guards reqs
	reqs []batchRequest
}

func newBatchServer(t *testing.T, respond func(w http.ResponseWriter, n int, events []batchEvent)) *batchServer {
	bs := &batchServer{t: t, respond: respond}
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if ct := r.Header.Get("Content-Type"); ct != batchContentType {
			t.Errorf("Content-Type %q, want %q", ct, batchContentType)
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		var events []batchEvent
		if err := json.Unmarshal(body, &events); err != nil {
			t.Errorf("body is not a JSON array of events: %v", err)
		}
		bs.mu.Lock()
		n := len(bs.reqs)
		bs.reqs = append(bs.reqs, batchRequest{at: time.Now(), size: len(body), events: events})
		bs.mu.Unlock()
		bs.respond(w, n, events)
	})
	bs.url = srv.URL
	return bs
}

func (bs *batchServer) requests() []batchRequest {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	return append([]batchRequest(nil), bs.reqs...)
}

// batchMessage is message off of its own aggregate, agg.
func batchMessage(off int64, agg string) *handler.Message {
	m := testMessage(off)
	m.AggregateID, m.Key = agg, []byte(agg)
	return m
}

// writeResults answers 200 with the results.
func writeResults(w http.ResponseWriter, results ...map[string]any) {
	if results == nil {
		results = []map[string]any{} // [], not null
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"results": results})
}

func TestHTTPBatchPartialFailure(t *testing.T) {
	bs := newBatchServer(t, func(w http.ResponseWriter, n int, events []batchEvent) {
		if n > 0 {
			w.WriteHeader(http.StatusNoContent) // no body: all done
			return
		}
		writeResults(w,
			map[string]any{"id": events[1].ID, "action": "retry", "retry-after": 0.02},
			map[string]any{"id": events[2].ID, "action": "dead-letter", "reason": "unknown cart"},
			map[string]any{"id": events[3].ID, "action": "done"},
		)
	})
	var obs retries
	h := build(t, "http", sinkConfig(bs.url, map[string]any{
		"batch": map[string]any{"max-messages": 5, "linger": "500ms"}, // the first batch is cut full
	}), handler.Deps{Observer: &obs})
	a := newAcks(t)
	for off := range int64(5) {
		h.Handle(context.Background(), batchMessage(off, fmt.Sprint("cart-", off)), a.ack(off))
	}
	for off := range int64(5) {
		err := a.wait(t, off)
		if off == 2 {
			wantClass(t, err, handler.Permanent)
			if !strings.Contains(err.Error(), "unknown cart") || !strings.Contains(err.Error(), "dead-letter") {
				t.Errorf("dead-letter error %q lacks the action or the reason", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("message %d: %v, want nil", off, err)
		}
	}
	reqs := bs.requests()
	if len(reqs) != 2 || len(reqs[0].events) != 5 || len(reqs[1].events) != 1 {
		t.Fatalf("requests %+v, want one of 5 events, then the retried one alone", reqs)
	}
	if ev := reqs[1].events[0]; ev.offset(t) != 1 || ev.Attempt != "2" {
		t.Errorf("second request carried %+v, want message 1, attempt 2", ev)
	}
	got := obs.list()
	if len(got) != 1 || got[0].offset != 1 || got[0].wait != 20*time.Millisecond {
		t.Errorf("retries %+v, want message 1 once, after the 20ms its result asked for", got)
	}
}

func TestHTTPBatchLingerSendsAPartialBatch(t *testing.T) {
	bs := newBatchServer(t, func(w http.ResponseWriter, _ int, _ []batchEvent) { w.WriteHeader(http.StatusOK) })
	const linger = 300 * time.Millisecond // far longer than three calls of Handle
	h := build(t, "http", sinkConfig(bs.url, map[string]any{
		"batch": map[string]any{"max-messages": 100, "linger": linger.String()},
	}), handler.Deps{})
	a := newAcks(t)
	start := time.Now()
	for off := range int64(3) {
		h.Handle(context.Background(), batchMessage(off, fmt.Sprint("cart-", off)), a.ack(off))
	}
	for off := range int64(3) {
		if err := a.wait(t, off); err != nil {
			t.Errorf("message %d: %v", off, err)
		}
	}
	reqs := bs.requests()
	if len(reqs) != 1 || len(reqs[0].events) != 3 {
		t.Fatalf("requests %+v, want one of the 3 messages", reqs)
	}
	if waited := reqs[0].at.Sub(start); waited < linger {
		t.Errorf("the partial batch was sent %v after its first message, before linger (%v)", waited, linger)
	}
}

func TestHTTPBatchMaxBytesSplits(t *testing.T) {
	bs := newBatchServer(t, func(w http.ResponseWriter, _ int, _ []batchEvent) { w.WriteHeader(http.StatusOK) })
	const maxBytes = 4096
	h := build(t, "http", sinkConfig(bs.url, map[string]any{
		"batch": map[string]any{"max-messages": 100, "max-bytes": maxBytes, "linger": "100ms"},
	}), handler.Deps{})
	a := newAcks(t)
	const n = 7 // the last one larger than max-bytes on its own
	for off := range int64(n) {
		m := batchMessage(off, fmt.Sprint("cart-", off))
		size := 1000
		if off == n-1 {
			size = 2 * maxBytes
		}
		m.Value = []byte(`{"pad":"` + strings.Repeat("x", size) + `"}`)
		h.Handle(context.Background(), m, a.ack(off))
	}
	for off := range int64(n) {
		if err := a.wait(t, off); err != nil {
			t.Errorf("message %d: %v", off, err)
		}
	}
	seen, multi := 0, 0
	for _, r := range bs.requests() {
		seen += len(r.events)
		if len(r.events) > 1 {
			multi++
			if r.size > maxBytes {
				t.Errorf("a batch of %d messages is %d bytes, over max-bytes %d", len(r.events), r.size, maxBytes)
			}
		}
		for _, ev := range r.events {
			if ev.offset(t) == n-1 && len(r.events) != 1 {
				t.Errorf("the message over max-bytes went with %d others", len(r.events)-1)
			}
		}
	}
	if seen != n || multi == 0 {
		t.Errorf("%d messages sent in %d requests (%d of several), want %d, some batched", seen, len(bs.requests()), multi, n)
	}
}

func TestHTTPBatchMalformedResponseRetriesAll(t *testing.T) {
	for name, body := range map[string]string{
		"not json":      "thanks!",
		"no results":    `{"ok":true}`,
		"results wrong": `{"results":{"id":"x"}}`,
		"results null":  `{"results":null}`,
		// HTTP.md: an entry of the wrong shape makes the whole body
		// malformed, those the other entries call done retried too.
		"entry a number":   `{"results":[7,{"id":"x","action":"done"}]}`,
		"id a number":      `{"results":[{"id":7}]}`,
		"retry-after text": `{"results":[{"id":"x","action":"retry","retry-after":"30"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			bs := newBatchServer(t, func(w http.ResponseWriter, n int, _ []batchEvent) {
				if n == 0 {
					_, _ = io.WriteString(w, body) // 200
					return
				}
				writeResults(w) // {"results":[]}: all done
			})
			var obs retries
			h := build(t, "http", sinkConfig(bs.url, map[string]any{
				"batch": map[string]any{"max-messages": 3, "linger": "1s"},
			}), handler.Deps{Observer: &obs})
			a := newAcks(t)
			for off := range int64(3) {
				h.Handle(context.Background(), batchMessage(off, fmt.Sprint("cart-", off)), a.ack(off))
			}
			for off := range int64(3) {
				if err := a.wait(t, off); err != nil {
					t.Errorf("message %d: %v, want nil after a retry", off, err)
				}
			}
			got := obs.list()
			if len(got) != 3 {
				t.Fatalf("retries %+v, want each of the 3 messages once", got)
			}
			for _, r := range got {
				if !errors.Is(r.err, errMalformedResults) {
					t.Errorf("retry of message %d: %v, want a malformed batch response", r.offset, r.err)
				}
			}
		})
	}
}

func TestHTTPBatchUnknownResultActionRetriesThatMessage(t *testing.T) {
	bs := newBatchServer(t, func(w http.ResponseWriter, n int, events []batchEvent) {
		if n == 0 {
			writeResults(w, map[string]any{"id": events[0].ID, "action": "explode"},
				map[string]any{"id": "not-in-the-batch", "action": "dead-letter"})
			return
		}
		writeResults(w)
	})
	var obs retries
	h := build(t, "http", sinkConfig(bs.url, map[string]any{
		"batch": map[string]any{"max-messages": 2, "linger": "1s"},
	}), handler.Deps{Observer: &obs})
	a := newAcks(t)
	for off := range int64(2) {
		h.Handle(context.Background(), batchMessage(off, fmt.Sprint("cart-", off)), a.ack(off))
	}
	for off := range int64(2) {
		if err := a.wait(t, off); err != nil {
			t.Errorf("message %d: %v", off, err)
		}
	}
	if got := obs.list(); len(got) != 1 || got[0].offset != 0 {
		t.Errorf("retries %+v, want message 0 only", got)
	}
}

// A response that is not a success, or carries Wowd-Action, says what
// follows for every message of the batch, as the response → action table
// says for one.
// Wowd-Action applies to every message of a batch whatever the status,
// done included; a status that is not a success does without it.
func TestHTTPBatchStatusAppliesToEveryMessage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		action string
		want   handler.Class
		done   bool // no failure: want is not used
	}{
		{"400", http.StatusBadRequest, "", handler.Permanent, false},
		{"503", http.StatusServiceUnavailable, "", handler.Transient, false},
		{"200 with skip", http.StatusOK, "skip", handler.Skip, false},
		{"500 with dead-letter", http.StatusInternalServerError, "dead-letter", handler.Permanent, false},
		{"200 with done", http.StatusOK, "done", 0, true},
		{"500 with done", http.StatusInternalServerError, "done", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bs := newBatchServer(t, func(w http.ResponseWriter, _ int, events []batchEvent) {
				if tc.action != "" {
					w.Header().Set(ActionHeader, tc.action)
				}
				w.WriteHeader(tc.status)
				// A result list is only read from a success without Wowd-Action.
				_ = json.NewEncoder(w).Encode(map[string]any{"results": []map[string]any{{"id": events[0].ID, "action": "done"}}})
			})
			h := build(t, "http", sinkConfig(bs.url, map[string]any{
				"max-attempts": 1, "batch": map[string]any{"max-messages": 3, "linger": "1s"},
			}), handler.Deps{})
			a := newAcks(t)
			for off := range int64(3) {
				h.Handle(context.Background(), batchMessage(off, fmt.Sprint("cart-", off)), a.ack(off))
			}
			for off := range int64(3) {
				if err := a.wait(t, off); tc.done {
					if err != nil {
						t.Errorf("message %d: %v, want done", off, err)
					}
				} else {
					wantClass(t, err, tc.want)
				}
			}
			if reqs := bs.requests(); len(reqs) != 1 {
				t.Errorf("%d requests, want 1", len(reqs))
			}
		})
	}
}

func TestHTTPBatchCloseAcknowledgesTheBatchBeingFilled(t *testing.T) {
	bs := newBatchServer(t, func(w http.ResponseWriter, _ int, _ []batchEvent) { w.WriteHeader(http.StatusOK) })
	h := build(t, "http", sinkConfig(bs.url, map[string]any{
		"batch": map[string]any{"max-messages": 10, "linger": "1m"},
	}), handler.Deps{})
	a := newAcks(t)
	for off := range int64(2) {
		h.Handle(context.Background(), batchMessage(off, fmt.Sprint("cart-", off)), a.ack(off))
	}
	if err := h.(handler.Closer).Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for off := range int64(2) {
		if err := a.wait(t, off); !errors.Is(err, handler.ErrClosed) {
			t.Errorf("message %d: %v, want handler.ErrClosed", off, err)
		}
	}
	if reqs := bs.requests(); len(reqs) != 0 {
		t.Errorf("%d requests after Close, want none", len(reqs))
	}
}

func TestHTTPBatchCanceledMessageIsLeftOut(t *testing.T) {
	bs := newBatchServer(t, func(w http.ResponseWriter, _ int, _ []batchEvent) { w.WriteHeader(http.StatusOK) })
	h := build(t, "http", sinkConfig(bs.url, map[string]any{
		"batch": map[string]any{"max-messages": 2, "linger": "1m"},
	}), handler.Deps{})
	a := newAcks(t)
	ctx, cancel := context.WithCancel(context.Background())
	h.Handle(ctx, batchMessage(0, "cart-0"), a.ack(0))
	cancel()
	if err := a.wait(t, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled message: %v, want context.Canceled", err)
	}
	h.Handle(context.Background(), batchMessage(1, "cart-1"), a.ack(1)) // the second: the batch is cut
	if err := a.wait(t, 1); err != nil {
		t.Errorf("message 1: %v", err)
	}
	reqs := bs.requests()
	if len(reqs) != 1 || len(reqs[0].events) != 1 || reqs[0].events[0].offset(t) != 1 {
		t.Errorf("requests %+v, want one carrying message 1 alone", reqs)
	}
}

// A batch's request in flight is canceled once every message it carries
// was given up (a revoke, a try's timeout), as an unbatched request is with
// its message, so it does not run on while the messages are delivered
// again; while one of them still waits for it, it runs on.
func TestHTTPBatchRequestCanceledWithItsLastMember(t *testing.T) {
	ended := make(chan struct{}, 2)
	started := make(chan int, 2)
	release := make(chan struct{})
	var n atomic.Int32
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		started <- int(n.Add(1))
		hang(r, release)
		ended <- struct{}{}
	})
	h := build(t, "http", sinkConfig(srv.URL, map[string]any{
		"request-timeout": "1m", "batch": map[string]any{"max-messages": 2, "linger": "1m"},
	}), handler.Deps{})
	a := newAcks(t)
	ctx0, cancel0 := context.WithCancel(context.Background())
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	h.Handle(ctx0, batchMessage(0, "cart-0"), a.ack(0))
	h.Handle(ctx1, batchMessage(1, "cart-1"), a.ack(1))
	<-started
	cancel0() // one member given up: the other still waits for the request
	if err := a.wait(t, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("message 0: %v, want context.Canceled", err)
	}
	select {
	case <-ended:
		t.Fatal("the request ended while message 1 still waited for it")
	case <-time.After(200 * time.Millisecond):
	}
	cancel1() // the last one: nothing waits for the request
	if err := a.wait(t, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("message 1: %v, want context.Canceled", err)
	}
	select {
	case <-ended: // the server saw the client give up
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("the request ran on after every message it carried was given up (request-timeout is 1m)")
	}
	close(release)
	if got := n.Load(); got != 1 {
		t.Errorf("%d requests, want 1", got)
	}
}

// Fed by wowd's executor, the sink never has two messages of one aggregate
// in a batch or in flight, and each aggregate's messages reach the server,
// and succeed there, in order, retries included.
func TestHTTPBatchOrderPerAggregate(t *testing.T) {
	const aggregates, perAggregate = 12, 15
	var (
		mu       sync.Mutex // guards the three below
		inFlight = map[string]bool{}
		next     = map[string]int64{} // per aggregate: the offset it must see done next
		tried    = map[int64]int{}    // per offset: attempts the server saw
	)
	for a := range int64(aggregates) {
		next[fmt.Sprint("cart-", a)] = a
	}
	bs := newBatchServer(t, func(w http.ResponseWriter, _ int, events []batchEvent) {
		var results []map[string]any
		mu.Lock()
		inBatch := map[string]bool{}
		for _, ev := range events {
			if inBatch[ev.Subject] || inFlight[ev.Subject] {
				t.Errorf("aggregate %s has two messages in a batch or in flight", ev.Subject)
			}
			inBatch[ev.Subject], inFlight[ev.Subject] = true, true
			off := ev.offset(t)
			if want := next[ev.Subject]; off != want {
				t.Errorf("aggregate %s: offset %d arrived, want %d next", ev.Subject, off, want)
			}
			tried[off]++
			if off%4 == 1 && tried[off] < 3 { // a quarter fail twice first
				results = append(results, map[string]any{"id": ev.ID, "action": "retry"})
			} else {
				next[ev.Subject] = off + aggregates
			}
		}
		mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		mu.Lock()
		for _, ev := range events {
			delete(inFlight, ev.Subject)
		}
		mu.Unlock()
		writeResults(w, results...)
	})
	h := build(t, "http", sinkConfig(bs.url, map[string]any{
		"max-attempts": 0, "max-concurrency": 3,
		"batch": map[string]any{"max-messages": 5, "linger": "2ms"},
	}), handler.Deps{})

	ex := executor.New(executor.Options{Workers: 2})
	defer func() {
		if err := ex.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	g := ex.Group(false)
	var wg sync.WaitGroup
	wg.Add(aggregates * perAggregate)
	for i := range int64(aggregates * perAggregate) {
		agg := fmt.Sprint("cart-", i%aggregates)
		task := &sinkTask{h: h, m: batchMessage(i, agg), done: wg.Done, t: t}
		if err := g.Submit(agg, task); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for a := range int64(aggregates) {
		if got, want := next[fmt.Sprint("cart-", a)], a+aggregates*perAggregate; got != want {
			t.Errorf("aggregate %d: done up to offset %d, want all", a, got-aggregates)
		}
	}
}

// sinkTask hands one message to a handler as a receiver's job does: the
// executor's next task of the aggregate starts once its Ack came.
type sinkTask struct {
	t    *testing.T
	h    handler.Handler
	m    *handler.Message
	done func()
}

func (k *sinkTask) Run(r executor.Resume) executor.Status {
	k.h.Handle(context.Background(), k.m, handler.AckFunc(func(err error) {
		if err != nil {
			k.t.Errorf("message %d: %v", k.m.Offset, err)
		}
		r.Complete(err != nil)
		k.done()
	}))
	return executor.Pending
}

// A message's event carries, as attributes, what the binary mode sends as
// headers, but the configured ones.
func TestHTTPBatchEventMatchesBinaryHeaders(t *testing.T) {
	cfg := defaultHTTPConfig()
	cfg.URL = "http://127.0.0.1:1/wow"
	cfg.Headers = map[string]string{"Authorization": "Bearer secret"}
	cfg.Batch.MaxMessages = 10
	s, err := newHTTPSink(*cfg, handler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close(context.Background()) }()

	wowMsg := testMessage(7)
	wowMsg.AggregateID, wowMsg.Key = "cart 1%", []byte{0xff, 0x00}
	wowMsg.Headers = []handler.Header{{Key: "x-source", Value: []byte("shop")}, {Key: "x-source", Value: []byte("app")}}
	wowMsg.Timestamp = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	wowMsg.Wow = &handler.Wow{ID: "0ZX4", ContextName: "example", AggregateName: "cart", TenantID: "t\"1",
		Version: 3, HasVersion: true, Events: []string{"a", "b"},
		Header: []handler.WowHeader{{Key: "trace_id", Value: "abc"}}}
	raw := testMessage(8)
	raw.Value = []byte{0x00, 0x01, 0xfe}
	raw.Headers = []handler.Header{{Key: "content-type", Value: []byte("application/octet-stream")}}

	for _, m := range []*handler.Message{wowMsg, raw} {
		ev, id, err := s.encodeEvent(context.Background(), m, 2, s.live.Load())
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal(ev, &got); err != nil {
			t.Fatalf("event of message %d is not JSON: %v\n%s", m.Offset, err, ev)
		}
		req, err := s.newRequest(context.Background(), m, 2, s.live.Load())
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]any{"datacontenttype": req.Header.Get("Content-Type")}
		for k, vs := range req.Header {
			if k == "Content-Type" || k == "Authorization" {
				continue
			}
			v := strings.Join(vs, ",")
			if strings.HasPrefix(k, "Ce-") {
				v = ceDecode(v)
			}
			want[attributeName(k)] = v
		}
		if id != want["id"] {
			t.Errorf("id %q, want %q", id, want["id"])
		}
		data, hasData := got["data"]
		b64, hasB64 := got["data_base64"]
		delete(got, "data")
		delete(got, "data_base64")
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("message %d: attributes\n%v\nwant\n%v", m.Offset, got, want)
		}
		if m.Wow != nil {
			if !hasData || hasB64 || fmt.Sprint(data) != "map[id:e1]" {
				t.Errorf("Wow message: data %v, data_base64 %v; want the value as JSON", data, b64)
			}
			if got["subject"] != "cart 1%" || got["wowtenantid"] != `t"1` || got["kafkaheaderxsource"] != "shop,app" || got["wowheadertraceid"] != "abc" {
				t.Errorf("Wow message: attributes %v", got)
			}
			continue
		}
		if s, _ := b64.(string); hasData || s != base64.StdEncoding.EncodeToString(m.Value) {
			t.Errorf("binary message: data %v, data_base64 %v; want the value in base64", data, b64)
		}
	}
}

func TestHTTPBatchConfigErrors(t *testing.T) {
	spec, _ := handler.Default().Lookup("http")
	for _, tc := range []struct {
		batch map[string]any
		want  []string
	}{
		{map[string]any{"max-messages": -1, "linger": "0s"}, []string{"batch.max-messages:", "batch.linger:"}},
		{map[string]any{"max-messages": 10, "max-bytes": 10, "linger": "0s"}, []string{"batch.max-bytes:", "batch.linger:"}},
		{map[string]any{"max-messages": 10, "max-size": 10}, []string{"batch.max-size: unknown key"}},
		// Checked with batching off too, where they are written.
		{map[string]any{"max-bytes": 10, "linger": "-1s"}, []string{"batch.max-bytes:", "batch.linger:"}},
	} {
		_, err := handlerconfig.Decode(spec, map[string]any{"url": "http://127.0.0.1/", "batch": tc.batch})
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("batch %v: error %v, want one naming %q", tc.batch, err, w)
			}
		}
	}
	cfg := defaultHTTPConfig()
	cfg.Batch.MaxMessages, cfg.Batch.Linger = 10, time.Second
	if err := cfg.FitTry(10500 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "batch.linger:") {
		t.Errorf("linger 1s + request-timeout 10s in a try of 10.5s: %v, want a batch.linger error", err)
	}
	if err := cfg.FitTry(12 * time.Second); err != nil {
		t.Errorf("linger 1s + request-timeout 10s in a try of 12s: %v", err)
	}
	cfg.Batch.MaxMessages = 0
	if err := cfg.FitTry(10*time.Second + time.Millisecond); err != nil {
		t.Errorf("without batching, linger does not count: %v", err)
	}
}

// The trace context of a message's try is its event's traceparent
// attribute (the CloudEvents distributed tracing extension), as it is the
// traceparent header in binary mode.
func TestHTTPBatchEventCarriesTraceContext(t *testing.T) {
	cfg := defaultHTTPConfig()
	cfg.URL = "http://127.0.0.1:1/wow"
	cfg.Batch.MaxMessages = 10
	s, err := newHTTPSink(*cfg, handler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close(context.Background()) }()
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sc, ok := tracing.FromHeaders([]handler.Header{{Key: "traceparent", Value: []byte(parent)}})
	if !ok {
		t.Fatal("test traceparent does not parse")
	}
	ev, _, err := s.encodeEvent(tracing.Context(context.Background(), sc), testMessage(1), 1, s.live.Load())
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(ev, &got); err != nil {
		t.Fatal(err)
	}
	if got["traceparent"] != parent {
		t.Errorf("traceparent attribute %v, want %s", got["traceparent"], parent)
	}
}

// TestBatchResponseShapeIsStrict: HTTP.md's rule that an entry of the
// wrong shape makes the whole body malformed (every member retried) holds
// for a null in place of a string or a number, a null entry, and names in
// another case. encoding/json skips a null and matches names in any case,
// so such a body had its other entries applied and the null's member, or
// every member under "Results", counted done.
func TestBatchResponseShapeIsStrict(t *testing.T) {
	s := build(t, "http", sinkConfig("http://sink.test/wow", map[string]any{"max-attempts": 1}), handler.Deps{}).(*httpSink)
	live := []*call{{id: "m0"}, {id: "m1"}, {id: "m2"}}
	for _, body := range []string{
		`{"results":[{"id":"m0","action":"dead-letter"},{"id":"m1","action":null}]}`,
		`{"results":[{"id":"m0","action":"dead-letter"},null]}`,
		`{"results":[{"id":"m0","action":"dead-letter"},{"id":null,"action":"skip"}]}`,
		`{"results":[{"id":"m0","action":"dead-letter","reason":null}]}`,
		`{"results":[{"id":"m0","action":"retry","retry-after":null}]}`,
		`{"results":[{"id":"m0","action":"retry","retry-after":"30"}]}`,
		`{"Results":[{"id":"m0","action":"dead-letter"}]}`,
		`{"results":null}`,
	} {
		resp := &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(body))}
		for i, err := range s.batchOutcomes(resp, live) {
			if outcomeOf(err) != "transient" || !errors.Is(err, errMalformedResults) {
				t.Errorf("body %s: member %d: %s (%v), want retried as malformed", body, i, outcomeOf(err), err)
			}
		}
	}
	// Names other than the four are ignored, and a name's case matters
	// only for those: an entry's "ID" is not its id.
	body := `{"results":[{"id":"m0","action":"skip","note":null},{"ID":"m1","action":"dead-letter"}],"trace":null}`
	resp := &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(body))}
	got := s.batchOutcomes(resp, live)
	if outcomeOf(got[0]) != "skip" || got[1] != nil || got[2] != nil {
		t.Errorf("body %s: outcomes %s, %v, %v; want skip, done, done", body, outcomeOf(got[0]), got[1], got[2])
	}
}

// TestBatchResponseHoldsAFullResultList: a batch of max-messages members
// may each get an entry with a reason; the body is read up to 1 KiB per
// member the batch may carry (beyond 1 MiB), so such a list is applied.
// With a cap of 1 MiB whatever max-messages, 3,500 dead-letter entries with
// 256-byte reasons (1.1 MB) were malformed: every member retried, those
// the endpoint handled delivered again.
func TestBatchResponseHoldsAFullResultList(t *testing.T) {
	s := build(t, "http", sinkConfig("http://sink.test/wow", map[string]any{
		"max-attempts": 1, "batch": map[string]any{"max-messages": 4000},
	}), handler.Deps{}).(*httpSink)
	const n = 3500
	live := make([]*call, n)
	var b strings.Builder
	b.WriteString(`{"results":[`)
	reason := strings.Repeat("r", 256)
	for i := range live {
		live[i] = &call{id: fmt.Sprintf("0ZX4dZ4Q%08d", i)}
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":%q,"action":"dead-letter","reason":%q}`, live[i].id, reason)
	}
	b.WriteString(`]}`)
	if b.Len() <= maxBatchResponse {
		t.Fatalf("body of %d bytes: want more than %d", b.Len(), maxBatchResponse)
	}
	resp := &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(b.String()))}
	for i, err := range s.batchOutcomes(resp, live) {
		if outcomeOf(err) != "permanent" {
			t.Fatalf("member %d of a %d-byte list: %s (%v), want dead-lettered (permanent)", i, b.Len(), outcomeOf(err), err)
		}
	}
	// Beyond the cap, the body is malformed as before.
	big := `{"results":[],"pad":"` + strings.Repeat("x", s.cfg.Batch.responseCap()) + `"}`
	resp = &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(big))}
	if err := s.batchOutcomes(resp, live[:1])[0]; !errors.Is(err, errMalformedResults) {
		t.Errorf("a body over the cap: %v, want malformed", err)
	}
}
