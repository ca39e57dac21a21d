package handlers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wowd/wowd/handler"
)

// TestHTTPResponseTable checks every row of the response → action table
// (responseRules, shown in HTTP.md), the status rows for every class of
// status and the Wowd-Action rows over statuses that say otherwise.
func TestHTTPResponseTable(t *testing.T) {
	const none = handler.Class(255) // done: a nil outcome
	for _, tc := range []struct {
		status   int
		action   string // Wowd-Action response header
		class    handler.Class
		requests int32 // with max-attempts 2
	}{
		{200, "", none, 1},
		{201, "", none, 1},
		{202, "", none, 1},
		{204, "", none, 1},
		{301, "", handler.Permanent, 1},
		{302, "", handler.Permanent, 1},
		{303, "", handler.Permanent, 1},
		{304, "", handler.Permanent, 1},
		{400, "", handler.Permanent, 1},
		{401, "", handler.Permanent, 1},
		{403, "", handler.Permanent, 1},
		{404, "", handler.Permanent, 1},
		{409, "", handler.Permanent, 1},
		{410, "", handler.Permanent, 1},
		{413, "", handler.Permanent, 1},
		{422, "", handler.Permanent, 1},
		{408, "", handler.Transient, 2},
		{429, "", handler.Transient, 2},
		{500, "", handler.Transient, 2},
		{502, "", handler.Transient, 2},
		{503, "", handler.Transient, 2},
		{504, "", handler.Transient, 2},
		{500, "done", none, 1},
		{404, " Done ", none, 1},
		{200, "retry", handler.Transient, 2},
		{400, "RETRY", handler.Transient, 2},
		{200, "dead-letter", handler.Permanent, 1},
		{503, "Dead-Letter", handler.Permanent, 1},
		{503, "skip", handler.Skip, 1},
		{200, "SKIP", handler.Skip, 1},
		{404, "later", handler.Permanent, 1}, // unknown: the status decides
		{503, "ack", handler.Transient, 2},
		{204, "nope", none, 1},
	} {
		name := strconv.Itoa(tc.status)
		if tc.action != "" {
			name += " " + strings.TrimSpace(tc.action)
		}
		t.Run(name, func(t *testing.T) {
			var n atomic.Int32
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				n.Add(1)
				if tc.action != "" {
					w.Header().Set("wowd-action", tc.action)
				}
				if tc.status >= 300 && tc.status < 400 {
					w.Header().Set("Location", "/elsewhere")
				}
				w.WriteHeader(tc.status)
			})
			h := build(t, "http", sinkConfig(srv.URL, map[string]any{"max-attempts": 2}), handler.Deps{})
			acks := newAcks(t)
			h.Handle(context.Background(), testMessage(1), acks.ack(1))
			err := acks.wait(t, 1)
			if tc.class == none {
				if err != nil {
					t.Fatalf("ack %v, want nil", err)
				}
			} else {
				wantClass(t, err, tc.class)
				if !strings.Contains(err.Error(), fmt.Sprintf("status %d", tc.status)) {
					t.Errorf("error %q does not give the status", err)
				}
				if got := handler.Attempts(err); got != int(tc.requests) {
					t.Errorf("attempts %d, want %d", got, tc.requests)
				}
			}
			if got := n.Load(); got != tc.requests {
				t.Errorf("%d requests, want %d", got, tc.requests)
			}
		})
	}
}

func TestHTTPActionHeaderInErrors(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(ActionHeader, "dead-letter")
		_, _ = w.Write([]byte("order unknown"))
	})
	h := build(t, "http", sinkConfig(srv.URL, nil), handler.Deps{})
	acks := newAcks(t)
	h.Handle(context.Background(), testMessage(1), acks.ack(1))
	err := acks.wait(t, 1)
	if want := `status 200 with Wowd-Action: dead-letter: "order unknown"`; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q lacks %q", err, want)
	}
}

func TestHTTPUnknownActionIsLogged(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(ActionHeader, "maybe-later")
	})
	h := build(t, "http", sinkConfig(srv.URL, nil), handler.Deps{Logger: zap.New(core)})
	acks := newAcks(t)
	h.Handle(context.Background(), testMessage(1), acks.ack(1))
	if err := acks.wait(t, 1); err != nil {
		t.Fatalf("ack %v: the status (200) should decide", err)
	}
	entries := logs.FilterMessageSnippet("unknown Wowd-Action").All()
	if len(entries) != 1 || entries[0].Level != zapcore.DebugLevel {
		t.Fatalf("log entries %+v, want one at debug level", logs.All())
	}
	if f := entries[0].ContextMap(); f["value"] != "maybe-later" || f["status"] != int64(200) {
		t.Errorf("fields %v", f)
	}
}

// TestHTTPRetryActionHonoursRetryAfterDate checks Wowd-Action: retry on a
// 200 response, with a Retry-After header in the HTTP date form.
func TestHTTPRetryActionHonoursRetryAfterDate(t *testing.T) {
	var arrived arrivals
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if arrived.add() == 1 {
			w.Header().Set(ActionHeader, "retry")
			w.Header().Set("Retry-After", time.Now().Add(3*time.Second).UTC().Format(http.TimeFormat))
		}
	})
	obs := &retries{}
	h := build(t, "http", sinkConfig(srv.URL, nil), handler.Deps{Observer: obs})
	acks := newAcks(t)
	h.Handle(context.Background(), testMessage(1), acks.ack(1))
	if err := acks.wait(t, 1); err != nil {
		t.Fatalf("ack %v", err)
	}
	got := obs.list()
	// An HTTP date has whole seconds: the wait is between 2s and 3s, less
	// the time the response took to arrive; the sink's own backoff is
	// at most 5ms here.
	if len(got) != 1 || got[0].wait <= 1500*time.Millisecond || got[0].wait > 3*time.Second {
		t.Fatalf("retries %+v, want one waiting 1.5s to 3s", got)
	}
	if !strings.Contains(got[0].err.Error(), "status 200 with Wowd-Action: retry") {
		t.Errorf("retry error %q", got[0].err)
	}
	at := arrived.times()
	if len(at) != 2 {
		t.Fatalf("%d requests, want 2", len(at))
	}
	if gap := at[1].Sub(at[0]); gap < got[0].wait-50*time.Millisecond {
		t.Errorf("retried after %v, Retry-After asked for %v (backoff-max is 5ms)", gap, got[0].wait)
	}
}

func TestParseAction(t *testing.T) {
	for in, want := range map[string]action{
		"done": actionDone, "DONE": actionDone, " retry\t": actionRetry,
		"Dead-Letter": actionDeadLetter, "skip": actionSkip,
	} {
		if got, ok := parseAction(in); !ok || got != want {
			t.Errorf("parseAction(%q) = %v, %v; want %v", in, got, ok, want)
		}
		if got, _ := parseAction(in); got.String() != strings.ToLower(strings.TrimSpace(in)) {
			t.Errorf("%v.String() = %q", got, got.String())
		}
	}
	for _, in := range []string{"", "dead letter", "deadletter", "ok", "retry later"} {
		if _, ok := parseAction(in); ok {
			t.Errorf("parseAction(%q) accepted", in)
		}
	}
}

// TestHTTPSlowResponses checks that a response slower than usual but within
// the timeout is a success, and that one past it is retried.
func TestHTTPSlowResponses(t *testing.T) {
	var n atomic.Int32
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("kafka-offset") {
		case "1": // slow but in time
			time.Sleep(300 * time.Millisecond)
		case "2": // too slow the first time
			if n.Add(1) == 1 {
				hang(r, nil)
			}
		case "3": // the status comes at once, the body too late
			w.WriteHeader(http.StatusServiceUnavailable)
			w.(http.Flusher).Flush()
			hang(r, nil)
		}
	})
	obs := &retries{}
	h := build(t, "http", sinkConfig(srv.URL, map[string]any{"request-timeout": "1s", "max-attempts": 2, "max-concurrency": 3}),
		handler.Deps{Observer: obs})
	acks := newAcks(t)
	began := time.Now()
	for off := int64(1); off <= 3; off++ {
		h.Handle(context.Background(), testMessage(off), acks.ack(off))
	}
	if err := acks.wait(t, 1); err != nil {
		t.Errorf("slow response in time: %v", err)
	}
	if err := acks.wait(t, 2); err != nil {
		t.Errorf("a timeout then a response: %v", err)
	}
	err := acks.wait(t, 3)
	wantClass(t, err, handler.Transient)
	if !strings.Contains(err.Error(), "status 503") {
		t.Errorf("slow body: %v", err)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("took %v with a timeout of 1s", d)
	}
	var timeouts int
	for _, r := range obs.list() {
		if strings.Contains(r.err.Error(), "timeout after 1s") {
			timeouts++
		}
	}
	if timeouts != 1 {
		t.Errorf("retries %+v, want one after a timeout", obs.list())
	}
}

// TestResponseRules checks the table the sink decides by: every status
// decided as the sink always has (2xx done; 408, 429 and 5xx and above
// retried; anything else dead-lettered), every row reachable, the rows
// decided elsewhere present once (their behaviour is checked by
// TestHTTPResponseTable, TestHTTPRedirects, TestHTTPConnectionRefusedIsTransient
// and TestHTTPTimeoutIsRetried), and ResponseActions naming outcomes as
// handler.Class does.
func TestResponseRules(t *testing.T) {
	for code := 0; code <= 999; code++ {
		want := actionDeadLetter
		switch {
		case code >= 200 && code <= 299:
			want = actionDone
		case code == 408 || code == 429 || code >= 500:
			want = actionRetry
		}
		if got := statusAction(code); got != want {
			t.Errorf("status %d: %v, want %v", code, got, want)
		}
	}
	kinds := map[ruleKind]int{}
	for i, r := range responseRules {
		kinds[r.kind]++
		if r.response == "" {
			t.Errorf("row %d has no response text", i)
		}
		decides := r.kind != byUnknownHeader && r.kind != byRedirect
		if decides != (r.act != 0) {
			t.Errorf("row %q: action %v", r.response, r.act)
		}
		switch r.kind {
		case byActionHeader:
			if a, ok := parseAction(strings.ToUpper(r.header)); !ok || a != r.act || a.String() != r.header {
				t.Errorf("row %q: parseAction gives %v, %v", r.response, a, ok)
			}
		case byStatus:
			reached := false
			for code := 100; code <= 999 && !reached; code++ {
				reached = r.matchesStatus(code) && statusAction(code) == r.act &&
					slices.IndexFunc(responseRules[:i], func(p responseRule) bool { return p.kind == byStatus && p.matchesStatus(code) }) < 0
			}
			if !reached {
				t.Errorf("row %q decides no status: an earlier row takes them all", r.response)
			}
		}
	}
	for _, k := range []ruleKind{byUnknownHeader, byRedirect, byHeaderListSize, byNoResponse} {
		if kinds[k] != 1 {
			t.Errorf("%d rows of kind %d, want 1", kinds[k], k)
		}
	}
	if kinds[byActionHeader] != 4 {
		t.Errorf("%d Wowd-Action rows, want one for each action", kinds[byActionHeader])
	}
	if noResponseAction(errors.New("connection refused")) != actionRetry {
		t.Error("a request without a response is not retried")
	}
	if a := noResponseAction(fmt.Errorf("POST x: http2: %s", errHeaderListText)); a != statusAction(http.StatusRequestHeaderFieldsTooLarge) {
		t.Errorf("headers beyond an HTTP/2 server's limit: %v, as a 431 %v", a, statusAction(http.StatusRequestHeaderFieldsTooLarge))
	}
	names := map[string]bool{"done": true}
	for _, c := range []handler.Class{handler.Transient, handler.Permanent, handler.Skip} {
		names[c.String()] = true
	}
	rows := ResponseActions()
	if len(rows) != len(responseRules) {
		t.Fatalf("%d rows, want %d", len(rows), len(responseRules))
	}
	for _, r := range rows {
		if r.Outcome != "" && !names[r.Outcome] {
			t.Errorf("row %q: outcome %q", r.Response, r.Outcome)
		}
		if r.Outcome == "" && r.Note == "" {
			t.Errorf("row %q says nothing of what follows", r.Response)
		}
	}
}
