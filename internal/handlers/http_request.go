package handlers

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/tracing"
)

const (
	maxErrorBody = 256      // bytes of a response body quoted in an error
	maxDrain     = 64 << 10 // bytes of a response body read to reuse its connection

	// A record's or a Wow message's header is passed on only within these
	// bounds (see passable): servers refuse or cut longer header lines.
	maxHeaderName  = 256     // bytes of its name, without the prefix wowd adds
	maxHeaderValue = 4 << 10 // bytes of its value
)

// post makes the running attempt c with live, its settings. It returns nil
// when the response says the message is done; otherwise an error classed as
// the response → action table (responseRules) says, unclassified meaning
// transient, carrying the wait a Retry-After response header asked for, if
// any (see retryAfterError).
func (s *httpSink) post(w *worker, c *call, live *httpLive) error {
	timeout := live.requestTimeout
	ctx, cancel := context.WithTimeout(c.ctx, timeout)
	defer cancel()
	// Close cancels the request if it stops waiting for it: it sets
	// aborted, then cancels what workers hold.
	w.mu.Lock()
	w.cancel = cancel
	aborted := s.aborted.Load()
	w.mu.Unlock()
	if aborted {
		cancel()
	}
	defer func() {
		w.mu.Lock()
		w.cancel = nil
		w.mu.Unlock()
	}()

	req, err := s.newRequest(ctx, c.m, c.attempt, live)
	if err != nil {
		return handler.Classed(handler.Permanent, s.wrap(err))
	}
	resp, err := s.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // we name the URL ourselves, redacted
		}
		if errors.Is(err, context.DeadlineExceeded) && c.ctx.Err() == nil {
			err = fmt.Errorf("timeout after %s: %w", timeout, err)
		}
		return noResponseAction(err).failure(s.wrap(err))
	}
	defer drainClose(resp.Body)
	act, override := s.action(resp)
	if act == actionDone {
		return nil
	}
	err = act.failure(s.wrap(responseError(resp, act, override)))
	if act != actionRetry {
		return err
	}
	if wait, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
		return &retryAfterError{err: err, wait: wait}
	}
	return err
}

// responseError describes a response that is not a success, quoting at
// most maxErrorBody bytes of its body and, when the sink asked for act with
// ActionHeader, saying so.
func responseError(resp *http.Response, act action, override bool) error {
	what := fmt.Sprintf("status %d", resp.StatusCode)
	if override {
		what += fmt.Sprintf(" with %s: %s", ActionHeader, act)
	}
	buf := make([]byte, maxErrorBody)
	n, _ := io.ReadFull(resp.Body, buf)
	body := strings.TrimSpace(strings.ToValidUTF8(string(buf[:n]), "\uFFFD"))
	if body == "" {
		return errors.New(what)
	}
	return fmt.Errorf("%s: %q", what, body)
}

// truncate cuts s after n bytes, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// drainClose reads what is left of a (small) body and closes it, so its
// connection goes back to the pool.
func drainClose(body io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, body, maxDrain)
	_ = body.Close()
}

// Canonical names of the headers the sink sets (net/http writes a header
// map's keys as they are, so building a request canonicalizes nothing).
const (
	hdrContentType    = "Content-Type"
	hdrSpecVersion    = "Ce-Specversion"
	hdrID             = "Ce-Id"
	hdrSource         = "Ce-Source"
	hdrType           = "Ce-Type"
	hdrSubject        = "Ce-Subject"
	hdrTime           = "Ce-Time"
	hdrWowContext     = "Wow-Context"
	hdrWowAggregate   = "Wow-Aggregate"
	hdrWowTenant      = "Wow-Tenant-Id"
	hdrWowRequest     = "Wow-Request-Id"
	hdrWowCommand     = "Wow-Command-Id"
	hdrWowVersion     = "Wow-Version"
	hdrWowEvents      = "Wow-Events"
	hdrTopic          = "Kafka-Topic"
	hdrPartition      = "Kafka-Partition"
	hdrOffset         = "Kafka-Offset"
	hdrKey            = "Kafka-Key"
	hdrKeyBase64      = "Kafka-Key-Base64"
	hdrAttempt        = "Wowd-Attempt"
	prefixKafkaHeader = "Kafka-Header-" // + the record header's name, canonical
	prefixWowHeader   = "Wow-Header-"   // + the Wow header's key, canonical
)

// newRequest builds the request of attempt for m: its value as the body,
// CloudEvents binary-mode headers, the Kafka position and the record's own
// headers, and the configured headers, headers-from-file as live (the
// attempt's settings) has them.
//
// It runs for every attempt, so it allocates little: the text it makes
// (names and values) is written into one buffer, made one string of which
// the headers hold substrings, and the headers' single values share one
// backing array.
func (s *httpSink) newRequest(ctx context.Context, m *handler.Message, attempt int, live *httpLive) (*http.Request, error) {
	// The URL was parsed once (parsing takes longer than building the
	// headers); the request gets a copy of its own.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "", bytes.NewReader(m.Value))
	if err != nil {
		return nil, err
	}
	u := *s.target.URL
	req.URL, req.Host = &u, s.target.Host
	w := m.Wow
	nWow := 0
	if w != nil {
		nWow = len(w.Header) + 7
	}
	files := live.files
	hb := headerBuilder{
		h:    make(http.Header, len(s.static)+len(files)+len(m.Headers)+nWow+14),
		vals: make([]string, 0, len(files)+nWow+14),
	}
	for k, v := range s.static {
		hb.h[k] = v
	}
	if len(files) > 0 {
		now := time.Now()
		for _, f := range files {
			hb.set(f.name, f.get(now))
		}
	}

	// The text, as spans of buf.
	var arr [320]byte
	buf := arr[:0]
	var records []textHeader // the record's headers
	contentType := s.cfg.ContentType
	for _, rh := range m.Headers {
		if !passable(rh.Key, rh.Value) {
			continue
		}
		var th textHeader
		th.name.from = len(buf)
		buf = append(buf, prefixKafkaHeader...)
		buf = appendCanonicalKey(buf, rh.Key)
		th.name.to = len(buf)
		th.value.from = len(buf)
		buf = append(buf, rh.Value...)
		th.value.to = len(buf)
		records = append(records, th)
		if len(rh.Value) > 0 && strings.EqualFold(rh.Key, "content-type") {
			contentType = string(rh.Value)
		}
	}
	var id, source, typ, ceTime, offset, version, events, key span
	id.from = len(buf)
	if w != nil && w.ID != "" {
		buf = appendCE(buf, w.ID)
	} else if m.Partition < 0 {
		// Taken in through the ingest, not read from Kafka: no position
		// yet. Its value names it, as a retry sends it again.
		sum := sha256.Sum256(m.Value)
		buf = appendCE(buf, m.Topic)
		buf = append(buf, "-ingested-"...)
		buf = hex.AppendEncode(buf, sum[:16])
	} else {
		buf = appendCE(buf, m.Topic)
		buf = append(buf, '-')
		buf = strconv.AppendInt(buf, int64(m.Partition), 10)
		buf = append(buf, '-')
		buf = strconv.AppendInt(buf, m.Offset, 10)
	}
	id.to = len(buf)
	source.from = len(buf)
	buf = append(buf, "wowd/"...)
	buf = appendCE(buf, m.Service)
	buf = append(buf, '/')
	buf = appendCE(buf, m.Dispatcher)
	source.to = len(buf)
	typ.from = len(buf)
	if w != nil && m.Kind == handler.KindCommand && w.Name != "" {
		buf = appendCE(buf, w.Name)
	} else {
		buf = append(buf, "wow."...)
		buf = appendCE(buf, m.Context)
		buf = append(buf, '.')
		buf = appendCE(buf, m.Aggregate)
		buf = append(buf, '.')
		buf = appendCE(buf, m.Kind.String())
	}
	typ.to = len(buf)
	ceTime.from = len(buf)
	if w != nil && !w.CreateTime.IsZero() {
		buf = w.CreateTime.UTC().AppendFormat(buf, time.RFC3339Nano)
	} else if !m.Timestamp.IsZero() {
		buf = m.Timestamp.UTC().AppendFormat(buf, time.RFC3339Nano)
	}
	ceTime.to = len(buf)
	offset.from = len(buf)
	buf = strconv.AppendInt(buf, m.Offset, 10)
	offset.to = len(buf)
	var wows []textHeader // the Wow message's header map
	if w != nil {
		version.from = len(buf)
		buf = strconv.AppendInt(buf, w.Version, 10)
		version.to = len(buf)
		events.from = len(buf)
		for i, e := range w.Events {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = append(buf, e...)
		}
		events.to = len(buf)
		for _, e := range w.Header {
			if !passableString(e.Key, e.Value) {
				continue
			}
			var th textHeader
			th.name.from = len(buf)
			buf = append(buf, prefixWowHeader...)
			buf = appendCanonicalKey(buf, e.Key)
			th.name.to = len(buf)
			th.literal = e.Value
			wows = append(wows, th)
		}
	}
	keyName, keyIsID := hdrKey, false
	key.from = len(buf)
	switch {
	case !utf8.Valid(m.Key) || !validHeaderValue(m.Key) || trimmedByHTTP(m.Key):
		keyName = hdrKeyBase64
		buf = base64.StdEncoding.AppendEncode(buf, m.Key)
	case string(m.Key) == m.AggregateID: // compared without a copy
		keyIsID = true
	default:
		buf = append(buf, m.Key...)
	}
	key.to = len(buf)
	text := string(buf)

	for _, th := range records {
		name := th.name.in(text)
		hb.h[name] = append(hb.h[name], th.value.in(text))
	}
	hb.set(hdrContentType, contentType)
	hb.set(hdrSpecVersion, "1.0")
	hb.set(hdrID, id.in(text))
	hb.set(hdrSource, source.in(text))
	hb.set(hdrType, typ.in(text))
	hb.set(hdrSubject, ceEncode(m.AggregateID))
	if v := ceTime.in(text); v != "" {
		hb.set(hdrTime, v)
	}
	if w != nil {
		hb.setValid(hdrWowContext, w.ContextName)
		hb.setValid(hdrWowAggregate, w.AggregateName)
		hb.setValid(hdrWowTenant, w.TenantID)
		hb.setValid(hdrWowRequest, w.RequestID)
		hb.setValid(hdrWowCommand, w.CommandID)
		if w.HasVersion {
			hb.set(hdrWowVersion, version.in(text))
		}
		hb.setValid(hdrWowEvents, events.in(text))
		for _, th := range wows {
			hb.set(th.name.in(text), th.literal)
		}
	}
	hb.set(hdrTopic, m.Topic)
	if m.Partition >= 0 { // a message taken in through the ingest has no position yet
		hb.set(hdrPartition, strconv.FormatInt(int64(m.Partition), 10))
		hb.set(hdrOffset, offset.in(text))
	}
	if keyIsID {
		hb.set(keyName, m.AggregateID)
	} else {
		hb.set(keyName, key.in(text))
	}
	hb.set(hdrAttempt, strconv.Itoa(attempt))
	tracing.Inject(ctx, hb.h) // the message's (or its span's) W3C trace context
	req.Header = hb.h
	return req, nil
}

// span is where a piece of text is in the text newRequest makes.
type span struct{ from, to int }

func (sp span) in(text string) string { return text[sp.from:sp.to] }

// textHeader is a header newRequest adds once it has its text: a name and
// a value in the text, or a literal value.
type textHeader struct {
	name, value span
	literal     string
}

// headerBuilder sets headers whose value is single, their one-value slices
// cut from one backing array.
type headerBuilder struct {
	h    http.Header
	vals []string
}

// set sets header k, canonical, to v, replacing what it held.
func (b *headerBuilder) set(k, v string) {
	b.vals = append(b.vals, v)
	n := len(b.vals)
	b.h[k] = b.vals[n-1 : n : n] // full: an Add copies it
}

// setValid sets header k to v when v is not empty, valid UTF-8 and a valid
// header value without white space at either end (which HTTP would not
// deliver as it is).
func (b *headerBuilder) setValid(k, v string) {
	if v != "" && utf8.ValidString(v) && validHeaderValue(v) && !trimmedByHTTP(v) {
		b.set(k, v)
	}
}

// appendCanonicalKey appends the canonical form of header name k, a token
// (validHeaderName), as textproto.CanonicalMIMEHeaderKey makes it: the
// first letter and each letter after a hyphen upper case, the others lower
// case. A hyphen precedes it in the name it completes.
func appendCanonicalKey(buf []byte, k string) []byte {
	upper := true
	for i := range len(k) {
		c := k[i]
		switch {
		case upper && 'a' <= c && c <= 'z':
			c -= 'a' - 'A'
		case !upper && 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		buf = append(buf, c)
		upper = c == '-'
	}
	return buf
}

// ceEncode percent-encodes a CloudEvents string attribute for an HTTP header
// (HTTP protocol binding, "HTTP Header Values"): space, double quote, percent
// and every byte outside printable ASCII.
func ceEncode(s string) string {
	for i := range len(s) {
		if ceEscape(s[i]) {
			return string(appendCE(make([]byte, 0, len(s)+16), s))
		}
	}
	return s
}

// appendCE appends s, percent-encoded as ceEncode does.
func appendCE(buf []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	for i := range len(s) {
		if c := s[i]; ceEscape(c) {
			buf = append(buf, '%', hex[c>>4], hex[c&15])
		} else {
			buf = append(buf, c)
		}
	}
	return buf
}

func ceEscape(c byte) bool { return c <= ' ' || c >= 0x7f || c == '"' || c == '%' }

// passable reports whether a record's or a Wow message's header may be
// passed on as a request header: its name a token of at most maxHeaderName
// bytes, its value valid UTF-8 of at most maxHeaderValue bytes without
// control characters, nor white space at either end. Others are dropped:
// sent as they are, they could split a header line (CR, LF), be cut at a
// NUL, make the server refuse the request, or arrive altered (HTTP/1.1
// trims a value, HTTP/2 calls one with white space at an end malformed);
// and a value that is not text has no meaning a header could keep.
func passable(name string, value []byte) bool {
	return len(name) <= maxHeaderName && len(value) <= maxHeaderValue &&
		validHeaderName(name) && validHeaderValue(value) && !trimmedByHTTP(value) && utf8.Valid(value)
}

// passableString is passable of a value held as a string.
func passableString(name, value string) bool {
	return len(name) <= maxHeaderName && len(value) <= maxHeaderValue &&
		validHeaderName(name) && validHeaderValue(value) && !trimmedByHTTP(value) && utf8.ValidString(value)
}

// validHeaderName reports whether s is an HTTP token (RFC 9110, 5.6.2).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue reports whether s can be sent as a header value: no
// control characters but tab (the rule net/http enforces).
func validHeaderValue[T string | []byte](s T) bool {
	for i := range len(s) {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// trimmedByHTTP reports whether a header value starts or ends with white
// space, which HTTP takes off (and HTTP/2 refuses): such a key would not
// arrive as it is.
func trimmedByHTTP[T ~string | ~[]byte](v T) bool {
	n := len(v)
	return n > 0 && (v[0] == ' ' || v[0] == '\t' || v[n-1] == ' ' || v[n-1] == '\t')
}

// parseRetryAfter reads a Retry-After header value, delta-seconds or an HTTP
// date, as a wait from now, capped at maxRetryAfter.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	secs, err := strconv.ParseUint(v, 10, 64)
	if err == nil {
		if secs >= uint64(maxRetryAfter/time.Second) {
			return maxRetryAfter, true
		}
		return time.Duration(secs) * time.Second, true
	}
	if errors.Is(err, strconv.ErrRange) {
		return maxRetryAfter, true // delta-seconds beyond 2^64: capped as any long wait
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), maxRetryAfter), true
	}
	return 0, false
}
