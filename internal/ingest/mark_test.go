package ingest

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/wowd/wowd/internal/metrics"
	"github.com/wowd/wowd/internal/wow"
)

// TestThePublishedCopyIsTheMessageAsPosted: wowd marks its copy as
// handled here in the record's headers, and publishes the message's bytes
// as they were posted. It set the Wow header local_first to "true" in
// them, which tells every consuming Wow service that has the aggregate
// local (a command's owner) to skip the message as handled by its own
// local bus: a message the caller sent with local_first "false" (Wow's
// for a void command, or for a message its local bus could not take) or
// without it was lost to them.
func TestThePublishedCopyIsTheMessageAsPosted(t *testing.T) {
	for name, body := range map[string]string{
		"local_first false": strings.Replace(message, `"header":{}`, `"header":{"local_first":"false","trace_id":"t"}`, 1),
		"local_first true":  strings.Replace(message, `"header":{}`, `"header":{"local_first":"true"}`, 1),
		"no local_first":    message,
		"no header":         strings.Replace(message, `"header":{},`, ``, 1),
		"as written":        strings.Replace(message, `"header":{}`, "\"header\" : { \"x\":\"<y>&\" }", 1),
	} {
		p := &producer{}
		in, _ := newIngest(p)
		if w := send(in, []byte(body)); w.Code != http.StatusAccepted {
			t.Fatalf("%s: answered %d (%s)", name, w.Code, w.Body)
		}
		if len(p.values) != 1 || !bytes.Equal(p.values[0], []byte(body)) {
			t.Errorf("%s: published %q, want the message as posted %q", name, p.values, body)
		}
		var m wow.Message
		if err := m.Decode(wow.KindEvent, p.values[0]); err != nil {
			t.Fatalf("%s: the published copy does not decode: %v", name, err)
		}
	}
}

// TestAMessageNotInUTF8IsRefused: JSON text is UTF-8 (RFC 8259), and Wow
// writes and reads its messages so: Jackson refuses a value with other
// bytes, and Wow's default decode-failure handler then stops the receive
// stream of every Wow service consuming the topic. A message with a byte
// that is not UTF-8 is answered 400 and neither admitted nor published.
// Before, it was accepted (202), and its published copy was not even what
// was handled here: marking it merged two keys the bytes told apart, and
// wrote U+FFFD for the stray bytes of the header.
func TestAMessageNotInUTF8IsRefused(t *testing.T) {
	bad := strings.Replace(message, `"header":{}`, "\"header\":{\"trace_id\":\"t\xff\"},\"x\xff\":1,\"x\xfe\":2", 1)
	for name, body := range map[string]string{
		"header": bad,
		"body":   strings.Replace(message, `"n":1`, "\"n\":\"\xc3\"", 1),
	} {
		p := &producer{}
		in, m := newIngest(p)
		w := send(in, []byte(body))
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "UTF-8") {
			t.Errorf("%s: answered %d (%s), want 400 naming UTF-8", name, w.Code, w.Body)
		}
		if n := p.published(); n != 0 {
			t.Errorf("%s: %d records published", name, n)
		}
		if n := counted(t, m, "rejected"); n != 1 {
			t.Errorf("%s: counted %v as rejected, want 1", name, n)
		}
	}
	p := &producer{}
	in, _ := newIngest(p)
	if w := send(in, []byte(strings.Replace(message, `"n":1`, `"n":"\u00e9 é \ud83d\ude00"`, 1))); w.Code != http.StatusAccepted {
		t.Errorf("a message in UTF-8 answered %d (%s)", w.Code, w.Body)
	}
}

// TestAnUnpairedSurrogateEscapeIsRefused: an escaped half of a UTF-16
// surrogate pair without its other half reads as U+FFFD in wowd (as in
// encoding/json) and as the lone surrogate in Jackson, so a message whose
// aggregateId had one was published under the key EF BF BD, which Wow's
// consumers find does not match the aggregate ID they read, and their
// default decode-failure handler stops the receive stream. In the aggregate
// ID or the names it is answered 400, neither admitted nor published;
// elsewhere (text in a body, which Jackson reads and wowd passes on as
// posted) it passes, as do pairs and escaped backslashes before a u.
func TestAnUnpairedSurrogateEscapeIsRefused(t *testing.T) {
	for name, esc := range map[string]string{
		"high alone":        `\ud800`,
		"high at the end":   `x\udbff`,
		"low alone":         `\udc00x`,
		"high then non-low": `\ud800\u0041`,
		"two highs":         `\ud800\ud800\udc00`,
		"upper-case escape": `\uD800`,
	} {
		for _, field := range []string{`"aggregateId":"`, `"contextName":"`, `"aggregateName":"`} {
			body := strings.Replace(message, field, field+esc, 1)
			if body == message {
				t.Fatalf("setup: no %s in the message", field)
			}
			p := &producer{}
			in, m := newIngest(p)
			w := send(in, []byte(body))
			if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "surrogate") {
				t.Errorf("%s in %s: answered %d (%s), want 400 naming the surrogate", name, field, w.Code, w.Body)
			}
			if n := p.published(); n != 0 {
				t.Errorf("%s in %s: %d records published", name, field, n)
			}
			if n := counted(t, m, "rejected"); n != 1 {
				t.Errorf("%s in %s: counted %v as rejected, want 1", name, field, n)
			}
		}
	}
	for name, esc := range map[string]string{
		"a lone half in a body": `\ud800`,
		"a pair":                `\ud83d\ude00`,
		"an escaped backslash":  `\\\\ud800`,
		"other escapes":         `\n\u00e9\"\\\\`,
	} {
		p := &producer{}
		in, _ := newIngest(p)
		if w := send(in, []byte(strings.Replace(message, `"n":1`, `"n":"`+esc+`"`, 1))); w.Code != http.StatusAccepted {
			t.Errorf("%s: answered %d (%s)", name, w.Code, w.Body)
		}
	}
	p := &producer{}
	in, _ := newIngest(p)
	if w := send(in, []byte(strings.Replace(message, `"aggregateId":"`, `"aggregateId":"\ud83d\ude00`, 1))); w.Code != http.StatusAccepted {
		t.Errorf("an aggregate ID with a surrogate pair answered %d (%s)", w.Code, w.Body)
	}
}

// TestAMessageBeyondJacksonsLimitsIsRefused: Jackson, which Wow reads its
// messages with, refuses by default a value nesting deeper than 500 levels
// (Jackson 3) or with a number longer than 1,000 characters, which wowd's
// decoder takes: such a message was answered 202 and published, and Wow's
// consumers stop their receive stream at it. It is answered 400, publishing
// nothing; one within the limits passes.
func TestAMessageBeyondJacksonsLimitsIsRefused(t *testing.T) {
	nest := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for name, tc := range map[string]struct {
		n    string
		code int
	}{
		"deep":                 {nest(jacksonMaxDepth), http.StatusBadRequest},
		"within depth":         {nest(jacksonMaxDepth - 10), http.StatusAccepted},
		"long number":          {strings.Repeat("1", jacksonMaxNumberLen+1), http.StatusBadRequest},
		"long fraction":        {"0." + strings.Repeat("5", jacksonMaxNumberLen), http.StatusBadRequest},
		"number within":        {strings.Repeat("1", jacksonMaxNumberLen), http.StatusAccepted},
		"long name":            {`{"` + strings.Repeat("k", jacksonMaxNameLen+1) + `":1}`, http.StatusBadRequest},
		"name within":          {`{"` + strings.Repeat("k", jacksonMaxNameLen) + `":1}`, http.StatusAccepted},
		"long name of emoji":   {`{"` + strings.Repeat("😀", jacksonMaxNameLen/2+1) + `":1}`, http.StatusBadRequest},
		"name within, escaped": {`{"` + strings.Repeat(`\u0041`, jacksonMaxNameLen) + `":1}`, http.StatusAccepted},
		"long string value":    {`"` + strings.Repeat("k", 2*jacksonMaxNameLen) + `"`, http.StatusAccepted},
		"brackets in a string": {`"` + nest(jacksonMaxDepth) + strings.Repeat("1", 2*jacksonMaxNumberLen) + `\"["`, http.StatusAccepted},
	} {
		p := &producer{}
		in, _ := newIngest(p)
		w := send(in, []byte(strings.Replace(message, `"n":1`, `"n":`+tc.n, 1)))
		if w.Code != tc.code || tc.code == http.StatusBadRequest && !strings.Contains(w.Body.String(), "Jackson") {
			t.Errorf("%s: answered %d (%s), want %d", name, w.Code, w.Body, tc.code)
		}
		want := 0
		if tc.code == http.StatusAccepted {
			want = 1
		}
		if n := p.published(); n != want {
			t.Errorf("%s: %d records published, want %d", name, n, want)
		}
	}
}

// TestAnEventOfTheOtherKindIsRefused: the decoder reads a domain event
// stream and a state event alike, so a state event posted as an event was
// published to .event, where Wow's event handlers take it for a domain
// event stream and handle its events a second time; a domain event stream
// posted as a state went to .state, which Wow cannot decode without the
// aggregate's state (its default decode-failure handler stops the receive
// stream). Each is a 400 naming the endpoint to use, nothing published.
func TestAnEventOfTheOtherKindIsRefused(t *testing.T) {
	state := strings.Replace(message, `"version":1,`, `"version":1,"firstOperator":"","firstEventTime":1755868563012,"state":{"id":"cart-1"},"tags":{},"deleted":false,`, 1)
	post := func(kind, body string) (*httptest.ResponseRecorder, *producer, *metrics.Metrics) {
		p := &producer{}
		in, m := newIngest(p)
		w := httptest.NewRecorder()
		in.ServeHTTP(w, httptest.NewRequest(http.MethodPost, Path+kind, strings.NewReader(body)))
		return w, p, m
	}
	for _, tt := range []struct{ kind, body, want string }{
		{"event", state, Path + "state"},
		{"state", message, Path + "event"},
		// What Wow's state event deserializer cannot read either.
		{"state", strings.Replace(state, `"state":{"id":"cart-1"}`, `"state":null`, 1), "an object"},
		{"state", strings.Replace(state, `"state":{"id":"cart-1"}`, `"state":[]`, 1), "an object"},
		{"state", strings.Replace(state, `,"deleted":false`, ``, 1), "once the aggregate is deleted"},
	} {
		w, p, m := post(tt.kind, tt.body)
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), tt.want) {
			t.Errorf("%s of the other kind: answered %d (%s), want 400 naming %s", tt.kind, w.Code, w.Body, tt.want)
		}
		if n := p.published(); n != 0 {
			t.Errorf("%s of the other kind: %d records published", tt.kind, n)
		}
		if n := counted(t, m, "rejected"); n != 1 {
			t.Errorf("%s of the other kind: counted %v as rejected, want 1", tt.kind, n)
		}
	}
	for _, tt := range []struct{ kind, body string }{{"event", message}, {"state", state}} {
		if w, p, _ := post(tt.kind, tt.body); w.Code != http.StatusAccepted || p.published() != 1 {
			t.Errorf("%s of its own kind: answered %d (%s), %d published", tt.kind, w.Code, w.Body, p.published())
		}
	}
}
