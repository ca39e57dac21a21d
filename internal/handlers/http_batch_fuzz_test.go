package handlers

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/wowd/wowd/handler"
)

// FuzzBatchEvent encodes messages whose record headers, key, Wow header
// map, value and content type are arbitrary, and checks that the event is a
// JSON object whose extension attribute names are lower-case letters and
// digits, whose id is the one returned, and whose data is the value: as JSON
// when the value is JSON in UTF-8 and the message a Wow message or of a JSON
// content type, else in base64, and absent for an empty value.
func FuzzBatchEvent(f *testing.F) {
	f.Add("trace_id", []byte("abc"), "content-type", []byte("application/json"), []byte("cart-1"), "trace_id", "t-9", "cart 1", []byte(`{"a":1}`), true)
	f.Add("x", []byte("\xff\"\\"), "y", []byte(nil), []byte{0xff}, "Local-First", "\x7f", "id%1/ü", []byte{0, 1, 2}, false)
	s := buildFuzzSink(f)
	f.Fuzz(func(t *testing.T, k1 string, v1 []byte, k2 string, v2 []byte, key []byte, wk, wv, subject string, value []byte, wow bool) {
		m := testMessage(7)
		m.Key, m.AggregateID, m.Value = key, subject, value
		m.Headers = []handler.Header{{Key: k1, Value: v1}, {Key: k2, Value: v2}}
		if wow {
			m.Wow = &handler.Wow{ID: subject, ContextName: wv, AggregateName: "cart", TenantID: wv,
				Header: []handler.WowHeader{{Key: wk, Value: wv}}}
		}
		ev, id, err := s.encodeEvent(context.Background(), m, 1, s.live.Load())
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]json.RawMessage
		if err := json.Unmarshal(ev, &got); err != nil {
			t.Fatalf("event is not a JSON object: %v\n%s", err, ev)
		}
		for name := range got {
			if name == "data" || name == "data_base64" {
				continue
			}
			if name == "" || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789") != "" {
				t.Errorf("attribute name %q: want lower-case letters and digits", name)
			}
		}
		var gotID string
		if err := json.Unmarshal(got["id"], &gotID); err != nil || gotID != id || id == "" {
			t.Errorf("id attribute %s, returned %q", got["id"], id)
		}
		data, hasData := got["data"]
		b64, hasB64 := got["data_base64"]
		var ct string
		_ = json.Unmarshal(got["datacontenttype"], &ct)
		asJSON := len(value) > 0 && (wow || jsonMediaType(ct)) && json.Valid(value) && utf8.Valid(value) // JSON between systems is UTF-8
		switch {
		case len(value) == 0:
			if hasData || hasB64 {
				t.Errorf("empty value: data %s, data_base64 %s", data, b64)
			}
		case asJSON:
			if !hasData || hasB64 || !bytes.Equal(data, bytes.TrimSpace(value)) { // JSON white space around it is not kept
				t.Errorf("JSON value %q: data %s, data_base64 %s", value, data, b64)
			}
		default:
			var enc string
			_ = json.Unmarshal(b64, &enc)
			dec, err := base64.StdEncoding.DecodeString(enc)
			if hasData || err != nil || !bytes.Equal(dec, value) {
				t.Errorf("value %q: data %s, data_base64 %s", value, data, b64)
			}
		}
	})
}

// FuzzBatchResponse gives the sink arbitrary bodies of a 200 response to a
// batch of three messages, with or without Retry-After, and checks the
// documented rules: an empty body means every message is done; a body that
// is not an object with a results array, or has an entry of the wrong
// shape (strictResults), retries every message; otherwise
// each message gets the action of the first entry with its id (done without
// one; an unknown action retries it), and a retry's wait is within
// [0, maxRetryAfter].
func FuzzBatchResponse(f *testing.F) {
	f.Add([]byte(``), "")
	f.Add([]byte(` {"results":[{"id":"m1","action":"Retry","retry-after":1e9},{"id":"m2","action":"skip"}]}`), "3")
	f.Add([]byte(`{"results":[{"id":"m0","action":"dead-letter","reason":"\u0000"},{"id":"m0","action":"done"}]}`), "")
	f.Add([]byte(`{"results":null}`), "x")
	f.Add([]byte(`[1,2]`), "")
	f.Add([]byte(`{"results":[{"id":"m0","action":"dead-letter"},{"id":"m1","action":null}]}`), "")
	f.Add([]byte(`{"results":[{"id":"m0","action":"skip"},null]}`), "")
	f.Add([]byte(`{"Results":[{"ID":"m0","ACTION":"dead-letter"}]}`), "")
	f.Add([]byte(`{"results":[{"id":"m2","action":"retry","retry-after":null}]}`), "")
	f.Add([]byte(`{"results":[{"id":"m2","action":"retry","retry-after":"5"}]}`), "")
	s := buildFuzzSink(f)
	live := []*call{{id: "m0"}, {id: "m1"}, {id: "m2"}}
	f.Fuzz(func(t *testing.T, body []byte, retryAfter string) {
		resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(bytes.NewReader(body))}
		if validHeaderValue(retryAfter) {
			resp.Header.Set("Retry-After", retryAfter)
		}
		out := s.batchOutcomes(resp, live)
		if len(out) != len(live) {
			t.Fatalf("%d outcomes for %d messages", len(out), len(live))
		}
		for i, err := range out {
			var ra *retryAfterError
			if errors.As(err, &ra) && (ra.wait < 0 || ra.wait > maxRetryAfter) {
				t.Errorf("message %d: wait %v outside [0, %v]", i, ra.wait, maxRetryAfter)
			}
		}
		want := make([]string, len(live))
		entries, wellFormed := strictResults(body)
		switch {
		case len(bytes.TrimSpace(body)) == 0:
			for i := range want {
				want[i] = "done"
			}
		case len(body) > s.cfg.Batch.responseCap() || !wellFormed:
			for i, err := range out {
				if c, _ := handler.Classify(err); c != handler.Transient || !errors.Is(err, errMalformedResults) {
					t.Fatalf("body %q: message %d: %v, want a transient malformed batch response", body, i, err)
				}
			}
			return
		default:
			for i, m := range live {
				want[i] = "done"
				for _, e := range entries {
					if id, _ := e["id"].(string); id != m.id {
						continue
					}
					action, _ := e["action"].(string)
					if a, ok := parseAction(action); ok {
						want[i] = a.outcome()
					} else {
						want[i] = "transient"
					}
					break
				}
			}
		}
		for i, err := range out {
			if got := outcomeOf(err); got != want[i] {
				t.Fatalf("body %q: message %s: outcome %s (%v), want %s", body, live[i].id, got, err, want[i])
			}
		}
	})
}

// strictResults is the fuzz test's own reading of a batch response body as
// HTTP.md states its shape, decoded generically: an object with a
// "results" array (that exact name) of objects whose id, action and reason,
// when there, are strings and whose retry-after is a number (a null is
// none of these). It reports false for any other body.
func strictResults(body []byte) ([]map[string]any, bool) {
	var doc any
	if json.Unmarshal(body, &doc) != nil {
		return nil, false
	}
	obj, _ := doc.(map[string]any)
	list, ok := obj["results"].([]any)
	if !ok {
		return nil, false
	}
	entries := make([]map[string]any, 0, len(list))
	for _, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			return nil, false
		}
		for _, k := range []string{"id", "action", "reason"} {
			if v, has := m[k]; has {
				if _, ok := v.(string); !ok {
					return nil, false
				}
			}
		}
		if v, has := m["retry-after"]; has {
			if _, ok := v.(float64); !ok {
				return nil, false
			}
		}
		entries = append(entries, m)
	}
	return entries, true
}

// A result's retry-after is a wait within [0, maxRetryAfter].
func TestResultRetryAfterIsCapped(t *testing.T) {
	for secs, want := range map[float64]time.Duration{-1: 0, 0: 0, 0.25: 250 * time.Millisecond, 30: 30 * time.Second, 1e9: maxRetryAfter} {
		if got := resultRetryAfter(secs); got != want {
			t.Errorf("retry-after %v: wait %v, want %v", secs, got, want)
		}
	}
}
