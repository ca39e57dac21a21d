package handlers

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/wowd/wowd/handler"
)

// ActionHeader is the response header by which a sink decides what follows
// its response, whatever the status: retry, dead-letter, skip or done
// (case-insensitive).
const ActionHeader = "Wowd-Action"

// action is what follows a response.
type action uint8

const (
	actionDone       action = iota + 1 // the message is handled
	actionRetry                        // transient: retry, honouring Retry-After
	actionDeadLetter                   // permanent: to the dead-letter topic
	actionSkip                         // acknowledged without handling
)

// ruleKind is what a row of the response → action table matches.
type ruleKind uint8

const (
	byActionHeader   ruleKind = iota + 1 // a known value of ActionHeader: header
	byUnknownHeader                      // another value of ActionHeader: ignored (httpSink.action)
	byRedirect                           // a redirect the client follows (checkRedirect)
	byStatus                             // a status: codes, or from to to
	byHeaderListSize                     // refused by the HTTP/2 transport before sending (headerListTooLarge)
	byNoResponse                         // no response (httpSink.post)
)

// responseRule is one row of the response → action table.
type responseRule struct {
	kind     ruleKind
	header   string // byActionHeader: the value, lower case
	codes    []int  // byStatus: these codes, or
	from, to int    // byStatus: the codes from to to
	act      action // what follows; 0 when the row itself decides nothing
	response string // the response the row matches, in Markdown, as HTTP.md shows it
	note     string // what follows, in words, in Markdown; may be empty
}

// responseRules is the response → action table of the http sink: what
// follows a response, or the lack of one; the first matching row decides.
// The sink decides by it (parseAction reads the ActionHeader rows,
// statusAction the status rows, post the no-response row), its tests check
// the other rows, and `make docs` writes it into HTTP.md (ResponseActions).
var responseRules = []responseRule{
	headerRule("done", actionDone, "the message is handled"),
	headerRule("retry", actionRetry, "retried, honouring `Retry-After`"),
	headerRule("dead-letter", actionDeadLetter, "not retried; parked or dead-lettered, as the dispatcher's `on-failure` says (park by default for `format: wow`)"),
	headerRule("skip", actionSkip, "acknowledged without handling, no retry, no dead letter"),
	{kind: byUnknownHeader, response: "`" + ActionHeader + "` with another value",
		note: "ignored (logged at debug level); the rows below decide"},
	{kind: byStatus, from: 200, to: 299, act: actionDone, response: "2xx"},
	{kind: byRedirect, response: "307, 308 to the same scheme and host",
		note: fmt.Sprintf("followed (up to %d hops); the final response decides", maxRedirects)},
	{kind: byStatus, from: 300, to: 399, act: actionDeadLetter, response: "other 3xx", note: "redirects are not followed"},
	{kind: byStatus, codes: []int{http.StatusRequestTimeout, http.StatusTooManyRequests}, act: actionRetry, response: "408, 429"},
	{kind: byStatus, from: 400, to: 499, act: actionDeadLetter, response: "other 4xx"},
	{kind: byStatus, from: 500, to: 999, act: actionRetry, response: "5xx to 9xx"}, // 6xx to 9xx: read as a server error
	// 1xx: the client passes on only 101, a protocol switch the sink never
	// asks for; below 100 is no HTTP status.
	{kind: byStatus, from: 0, to: 199, act: actionDeadLetter, response: "1xx, or below 100"},
	{kind: byHeaderListSize, act: actionDeadLetter, response: "over HTTP/2, request headers beyond the list size the server advertises (`SETTINGS_MAX_HEADER_LIST_SIZE`)",
		note: "not sent; as a 431 over HTTP/1.1: retrying cannot shrink them"},
	{kind: byNoResponse, act: actionRetry, response: "timeout, connection refused or reset, TLS or DNS error"},
}

// otherStatus is what follows a status no row matches: none, since a
// status has three digits.
const otherStatus = actionDeadLetter

// headerRule is the row of ActionHeader value v.
func headerRule(v string, a action, note string) responseRule {
	return responseRule{kind: byActionHeader, header: v, act: a,
		response: "`" + ActionHeader + ": " + v + "` (any status)", note: note}
}

// matchesStatus reports whether the status row r matches code.
func (r *responseRule) matchesStatus(code int) bool {
	if r.codes != nil {
		return slices.Contains(r.codes, code)
	}
	return r.from <= code && code <= r.to
}

// String returns the value of ActionHeader that asks for a.
func (a action) String() string {
	for i := range responseRules {
		if r := &responseRules[i]; r.kind == byActionHeader && r.act == a {
			return r.header
		}
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// class is the failure class of a response asking for a, which is not
// actionDone.
func (a action) class() handler.Class {
	switch a {
	case actionSkip:
		return handler.Skip
	case actionDeadLetter:
		return handler.Permanent
	}
	return handler.Transient
}

// outcome names what a does to the message: done, or the failure class.
func (a action) outcome() string {
	if a == actionDone {
		return "done"
	}
	return a.class().String()
}

// parseAction reads a value of ActionHeader.
func parseAction(v string) (action, bool) {
	v = strings.ToLower(strings.TrimSpace(v))
	for i := range responseRules {
		if r := &responseRules[i]; r.kind == byActionHeader && r.header == v {
			return r.act, true
		}
	}
	return 0, false
}

// statusAction is what follows a response with status code when it has no
// known ActionHeader: the first status row matching it decides.
func statusAction(code int) action {
	for i := range responseRules {
		if r := &responseRules[i]; r.kind == byStatus && r.matchesStatus(code) {
			return r.act
		}
	}
	return otherStatus
}

// noResponseAction is what follows a request that got no response, with
// err from the client: a request the HTTP/2 transport refused to send for
// the size of its headers, or any other.
func noResponseAction(err error) action {
	kind := byNoResponse
	if headerListTooLarge(err) {
		kind = byHeaderListSize
	}
	for i := range responseRules {
		if r := &responseRules[i]; r.kind == kind {
			return r.act
		}
	}
	panic("responseRules: no row for a request without a response")
}

// errHeaderListText is the text of the error by which Go's HTTP/2
// transport refuses a request whose headers exceed the server's
// SETTINGS_MAX_HEADER_LIST_SIZE (net/http's internal
// httpcommon.ErrRequestHeaderListSize, which no package exports).
// TestHeadersBeyondTheServersListSizeFailForGood ties it to the transport.
const errHeaderListText = "request header list larger than peer's advertised limit"

// headerListTooLarge reports whether err is the HTTP/2 transport's refusal
// of a request for the size of its headers.
func headerListTooLarge(err error) bool {
	return err != nil && strings.Contains(err.Error(), errHeaderListText)
}

// action decides what follows resp: its ActionHeader when it holds a known
// value (override is then true), else its status.
func (s *httpSink) action(resp *http.Response) (a action, override bool) {
	if v := resp.Header.Get(ActionHeader); v != "" {
		if a, ok := parseAction(v); ok {
			return a, true
		}
		s.log.Debug("ignoring an unknown "+ActionHeader+" response header; deciding by the status",
			zap.String("value", truncate(v, 64)), zap.Int("status", resp.StatusCode))
	}
	return statusAction(resp.StatusCode), false
}

// failure returns err, the failure of a response or request asking for a
// (not actionDone), classed as a says: unclassified for actionRetry, since
// errors are transient unless marked otherwise.
func (a action) failure(err error) error {
	if a == actionRetry {
		return err
	}
	return handler.Classed(a.class(), err)
}

// ResponseAction is one row of the http sink's response → action table.
type ResponseAction struct {
	Response string // the response the row matches, in Markdown
	Outcome  string // done, transient, permanent or skip; empty when the row itself decides nothing
	Note     string // what follows, in words, in Markdown; may be empty
}

// ResponseActions returns the response → action table the http sink decides
// by, in order: the first matching row decides. `make docs` writes it into
// HTTP.md.
func ResponseActions() []ResponseAction {
	out := make([]ResponseAction, len(responseRules))
	for i, r := range responseRules {
		out[i] = ResponseAction{Response: r.response, Note: r.note}
		if r.act != 0 {
			out[i].Outcome = r.act.outcome()
		}
	}
	return out
}
