package handlers

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/wowd/wowd/handler"
)

// FuzzRequestHeaders builds the request of a message whose Kafka record
// headers, key and Wow header map are arbitrary, and checks that nothing
// can be injected through them: every header of the request has a token for
// a name and a value without control characters; a record or Wow header is
// passed on only when its value is valid UTF-8 of at most maxHeaderValue
// bytes, else dropped; and the request, written as net/http writes it and
// read back, carries exactly the headers built, no more.
func FuzzRequestHeaders(f *testing.F) {
	// More, hostile, in testdata/fuzz/FuzzRequestHeaders.
	f.Add("trace_id", []byte("abc"), "content-type", []byte("application/avro"), []byte("cart-1"), "trace_id", "t-9", "cart-1")
	f.Add("x", []byte("ü"), "y", []byte(nil), []byte{0xff}, "local_first", "true", "id 1/ü")
	s := buildFuzzSink(f)
	f.Fuzz(func(t *testing.T, k1 string, v1 []byte, k2 string, v2 []byte, key []byte, wk, wv, subject string) {
		m := testMessage(7)
		m.Key, m.AggregateID = key, subject
		m.Headers = []handler.Header{{Key: k1, Value: v1}, {Key: k2, Value: v2}}
		m.Wow = &handler.Wow{ID: subject, ContextName: wv, AggregateName: "cart", TenantID: wv,
			Header: []handler.WowHeader{{Key: wk, Value: wv}}}
		req, err := s.newRequest(context.Background(), m, 1, s.live.Load())
		if err != nil {
			t.Fatal(err)
		}
		for name, vals := range req.Header {
			if !validHeaderName(name) {
				t.Errorf("header name %q is not a token", name)
			}
			for _, v := range vals {
				if !validHeaderValue(v) || !utf8.ValidString(v) {
					t.Errorf("header %s: value %q holds control characters or is not UTF-8", name, v)
				}
			}
			if strings.HasPrefix(name, prefixKafkaHeader) || strings.HasPrefix(name, prefixWowHeader) {
				if len(name) > len(prefixKafkaHeader)+maxHeaderName {
					t.Errorf("header name %q is longer than %d bytes after its prefix", name, maxHeaderName)
				}
				for _, v := range vals {
					if len(v) > maxHeaderValue {
						t.Errorf("header %s: value of %d bytes, want at most %d", name, len(v), maxHeaderValue)
					}
				}
			}
		}

		// Passed on exactly when acceptable.
		for _, rh := range m.Headers {
			got := req.Header.Values(prefixKafkaHeader + rh.Key)
			ok := acceptableHeader(rh.Key, string(rh.Value))
			if ok && !contains(got, string(rh.Value)) {
				t.Errorf("record header %q: %q not passed on", rh.Key, truncate(string(rh.Value), 64))
			}
			if !ok && validHeaderName(rh.Key) && contains(got, string(rh.Value)) {
				t.Errorf("record header %q: %q passed on", rh.Key, truncate(string(rh.Value), 64))
			}
		}
		if got := req.Header.Values(prefixWowHeader + wk); acceptableHeader(wk, wv) != contains(got, wv) {
			t.Errorf("Wow header %q: %q passed on: %v, want %v", truncate(wk, 64), truncate(wv, 64), contains(got, wv), acceptableHeader(wk, wv))
		}

		// Written and read back: the same headers, none added.
		var wire bytes.Buffer
		if err := req.Write(&wire); err != nil {
			t.Fatalf("writing the request: %v", err)
		}
		back, err := http.ReadRequest(bufio.NewReader(&wire))
		if err != nil {
			t.Fatalf("reading the request back: %v\n%q", err, wire.String())
		}
		for name, vals := range back.Header {
			switch name {
			case "User-Agent", "Content-Length":
				continue
			}
			want := req.Header[name]
			if len(want) != len(vals) {
				t.Fatalf("header %s read back as %q, built as %q", name, vals, want)
			}
			for i := range vals {
				if vals[i] != want[i] { // nothing the sink sends is altered on the way
					t.Fatalf("header %s read back as %q, built as %q", name, vals, want)
				}
			}
		}
		for name := range req.Header {
			if _, ok := back.Header[name]; !ok && strings.Trim(req.Header.Get(name), " \t") != "" {
				t.Fatalf("header %s lost on the wire", name)
			}
		}
		if body, _ := io.ReadAll(back.Body); !bytes.Equal(body, m.Value) {
			t.Fatalf("body read back as %q, want %q", body, m.Value)
		}
	})
}

// acceptableHeader is the rule FuzzRequestHeaders holds the sink to: a
// token of at most maxHeaderName bytes for a name; a value of valid UTF-8
// without control characters but tab, of at most maxHeaderValue bytes, and
// without white space at either end (HTTP would not deliver it as it is).
func acceptableHeader(name, value string) bool {
	return validHeaderName(name) && len(name) <= maxHeaderName &&
		utf8.ValidString(value) && len(value) <= maxHeaderValue && !strings.ContainsFunc(value, func(r rune) bool {
		return (r < ' ' && r != '\t') || r == 0x7f
	}) && strings.Trim(value, " \t") == value
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func buildFuzzSink(f *testing.F) *httpSink {
	f.Helper()
	spec, _ := handler.Default().Lookup("http")
	cfg := spec.Config().(*HTTPConfig)
	cfg.URL = "http://sink.test/wow"
	cfg.MaxAttempts = 1
	h, err := spec.New(cfg, handler.Deps{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = h.(handler.Closer).Close(context.Background()) })
	return h.(*httpSink)
}

// hops is an http.RoundTripper answering the first request with first and
// every later one (a redirect followed) with then; it never connects.
type hops struct {
	first, then *http.Response
	requests    int
}

func (h *hops) RoundTrip(req *http.Request) (*http.Response, error) {
	h.requests++
	r := h.then
	if h.requests == 1 {
		r = h.first
	}
	if req.Body != nil {
		_ = req.Body.Close()
	}
	out := *r
	out.Header = r.Header.Clone()
	out.Body = io.NopCloser(strings.NewReader("body"))
	out.Request = req
	return &out, nil
}

func response(status int, action, retryAfter, location string) *http.Response {
	h := http.Header{}
	if action != "" {
		h.Set(ActionHeader, action)
	}
	if retryAfter != "" {
		h.Set("Retry-After", retryAfter)
	}
	if location != "" {
		h.Set("Location", location)
	}
	return &http.Response{StatusCode: status, Status: strconv.Itoa(status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h}
}

// FuzzResponseAction gives the sink arbitrary responses (status, Wowd-Action,
// Retry-After, a redirect's Location and the response after it) and checks
// that each maps to exactly one action, the one the documented table
// (ResponseActions, as HTTP.md shows it) gives, and that a retry's wait is
// within [0, maxRetryAfter] and present exactly when Retry-After parses.
func FuzzResponseAction(f *testing.F) {
	// More (redirects, odd statuses, Retry-After) in
	// testdata/fuzz/FuzzResponseAction.
	f.Add(uint16(200), "", "", "", uint16(200), "", "")
	f.Add(uint16(503), "", "7", "", uint16(200), "", "")
	f.Add(uint16(404), " Done ", "", "", uint16(200), "", "")
	f.Add(uint16(400), "maybe", "", "", uint16(200), "", "")
	rows := documentedRows(f)
	s := buildFuzzSink(f)
	f.Fuzz(func(t *testing.T, status uint16, action, retryAfter, location string, thenStatus uint16, thenAction, thenWait string) {
		code, thenCode := int(status%1000), int(thenStatus%1000) // a response's status has three digits
		first := response(code, action, retryAfter, location)
		then := response(thenCode, thenAction, thenWait, location)
		tr := &hops{first: first, then: then}
		g := s.client.Transport.(redirectGuard) // the sink's own wrapping, around a fake
		g.next = tr
		s.client.Transport = g

		// What the table says: the response decides, or the redirect is
		// followed and the response after it decides (each later hop is
		// then, redirecting again up to maxRedirects hops).
		decide := first
		if follows(rows, first, s.target.URL) {
			decide = then // followed again up to maxRedirects hops, then decides
		}
		want := documentedOutcome(t, rows, decide)

		err := s.post(&worker{}, &call{ctx: context.Background(), m: testMessage(1), attempt: 1}, s.live.Load())
		got := outcomeOf(err)
		if got != want {
			t.Fatalf("status %d %s=%q Location=%q then %d %s=%q: outcome %s (%v), the table says %s",
				code, ActionHeader, action, location, thenCode, ActionHeader, thenAction, got, err, want)
		}
		var ra *retryAfterError
		hasWait := errors.As(err, &ra)
		_, parses := parseRetryAfter(decide.Header.Get("Retry-After"), time.Now())
		if hasWait != (got == "transient" && parses) {
			t.Fatalf("outcome %s, Retry-After %q: a wait given: %v", got, decide.Header.Get("Retry-After"), hasWait)
		}
		if hasWait && (ra.wait < 0 || ra.wait > maxRetryAfter) {
			t.Fatalf("Retry-After %q: wait %v outside [0, %v]", decide.Header.Get("Retry-After"), ra.wait, maxRetryAfter)
		}
	})
}

// outcomeOf names what post's result does to a message, as
// ResponseAction.Outcome does.
func outcomeOf(err error) string {
	if err == nil {
		return "done"
	}
	c, _ := handler.Classify(err)
	return c.String()
}

// docRow is a row of the documented table, read back from its text.
type docRow struct {
	header     string // a Wowd-Action value
	otherValue bool   // Wowd-Action with another value
	redirect   bool
	codes      []int
	from, to   int
	noResponse bool
	outcome    string
}

var (
	headerRow   = regexp.MustCompile("^`" + ActionHeader + ": ([a-z-]+)` \\(any status\\)$")
	classRow    = regexp.MustCompile(`^(?:other )?(\d)xx(?: to (\d)xx)?$`)
	belowRow    = regexp.MustCompile(`^(\d)xx, or below 100$`)
	codesRow    = regexp.MustCompile(`^(\d{3}(?:, \d{3})*)$`)
	redirectRow = regexp.MustCompile(`^(\d{3}(?:, \d{3})*) to the same scheme and host$`)
)

// documentedRows reads ResponseActions back as rules: what a reader of
// HTTP.md takes it to say. A row it cannot read fails the test: the table
// changed and this reading must follow.
func documentedRows(f *testing.F) []docRow {
	var rows []docRow
	codes := func(s string) []int {
		var out []int
		for _, c := range strings.Split(s, ", ") {
			n, _ := strconv.Atoi(c)
			out = append(out, n)
		}
		return out
	}
	for _, ra := range ResponseActions() {
		r := docRow{outcome: ra.Outcome}
		switch resp := ra.Response; {
		case headerRow.MatchString(resp):
			r.header = headerRow.FindStringSubmatch(resp)[1]
		case resp == "`"+ActionHeader+"` with another value":
			r.otherValue = true
		case redirectRow.MatchString(resp):
			r.redirect, r.codes = true, codes(redirectRow.FindStringSubmatch(resp)[1])
		case classRow.MatchString(resp):
			m := classRow.FindStringSubmatch(resp)
			lo, _ := strconv.Atoi(m[1])
			hi := lo
			if m[2] != "" {
				hi, _ = strconv.Atoi(m[2])
			}
			r.from, r.to = lo*100, hi*100+99
		case belowRow.MatchString(resp):
			d, _ := strconv.Atoi(belowRow.FindStringSubmatch(resp)[1])
			r.from, r.to = 0, d*100+99
		case codesRow.MatchString(resp):
			r.codes = codes(resp)
		case strings.HasPrefix(resp, "timeout,"), strings.HasPrefix(resp, "over HTTP/2, request headers beyond"):
			r.noResponse = true // a request without a response: no response to fuzz
		default:
			f.Fatalf("the documented row %q is not understood by this test", resp)
		}
		rows = append(rows, r)
	}
	return rows
}

// follows reports whether the table has resp followed as a redirect.
func follows(rows []docRow, resp *http.Response, target *url.URL) bool {
	for _, r := range rows {
		switch {
		case r.header != "" && strings.EqualFold(strings.TrimSpace(resp.Header.Get(ActionHeader)), r.header):
			return false // a known Wowd-Action decides, whatever the status
		case r.redirect && contains(intStrings(r.codes), strconv.Itoa(resp.StatusCode)):
			loc, err := target.Parse(resp.Header.Get("Location"))
			return resp.Header.Get("Location") != "" && err == nil && loc.Scheme == target.Scheme && loc.Host == target.Host
		}
	}
	return false
}

// documentedOutcome is the outcome the first matching row gives resp.
func documentedOutcome(t *testing.T, rows []docRow, resp *http.Response) string {
	for _, r := range rows {
		switch {
		case r.header != "":
			if strings.EqualFold(strings.TrimSpace(resp.Header.Get(ActionHeader)), r.header) {
				return r.outcome
			}
		case r.otherValue, r.redirect, r.noResponse:
		case r.codes != nil:
			if contains(intStrings(r.codes), strconv.Itoa(resp.StatusCode)) {
				return r.outcome
			}
		case r.from <= resp.StatusCode && resp.StatusCode <= r.to:
			return r.outcome
		}
	}
	t.Fatalf("the documented table has no row for status %d", resp.StatusCode)
	return ""
}

func intStrings(xs []int) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = fmt.Sprint(x)
	}
	return out
}

// TestHTTPRedirectsFuzzFound holds what FuzzResponseAction found, against a
// real server: a redirect carrying a known Wowd-Action is not followed (the
// header decides, whatever the status), and a redirect whose Location
// cannot be parsed is a permanent failure (other 3xx), not a retry.
func TestHTTPRedirectsFuzzFound(t *testing.T) {
	var mu sync.Mutex // guards paths
	var paths []string
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		switch r.URL.Path {
		case "/skip":
			w.Header().Set(ActionHeader, "skip")
			w.Header().Set("Location", "/target")
			w.WriteHeader(http.StatusTemporaryRedirect)
		case "/bad":
			w.Header()["Location"] = []string{"%zz"}
			w.WriteHeader(http.StatusPermanentRedirect)
		}
	})
	acks := newAcks(t)
	build(t, "http", sinkConfig(srv.URL+"/skip", nil), handler.Deps{}).Handle(context.Background(), testMessage(1), acks.ack(1))
	wantClass(t, acks.wait(t, 1), handler.Skip)
	build(t, "http", sinkConfig(srv.URL+"/bad", map[string]any{"max-attempts": 3}), handler.Deps{}).Handle(context.Background(), testMessage(2), acks.ack(2))
	wantClass(t, acks.wait(t, 2), handler.Permanent)
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"/skip", "/bad"}; !slices.Equal(paths, want) {
		t.Errorf("requests %q, want %q (no redirect followed, no retry)", paths, want)
	}
}
