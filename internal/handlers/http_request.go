package handlers

import (
	"bytes"
	"context"
	"encoding/base64"
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
)

const (
	maxErrorBody = 256      // bytes of a response body quoted in an error
	maxDrain     = 64 << 10 // bytes of a response body read to reuse its connection
)

// post makes the running attempt c. It returns nil when the response says
// the message is done; otherwise an error classed as the response → action
// table (responseRules) says, unclassified meaning transient, carrying the
// wait a Retry-After response header asked for, if any (see
// retryAfterError).
func (s *httpSink) post(c *call) error {
	ctx, cancel := context.WithTimeout(c.ctx, s.cfg.RequestTimeout)
	defer cancel()
	defer context.AfterFunc(s.closing, cancel)()

	req, err := s.newRequest(ctx, c.m, c.attempt)
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
			err = fmt.Errorf("timeout after %s: %w", s.cfg.RequestTimeout, err)
		}
		return noResponseAction().failure(s.wrap(err))
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

// newRequest builds the request of attempt for m: its value as the body,
// CloudEvents binary-mode headers, the Kafka position and the record's own
// headers.
func (s *httpSink) newRequest(ctx context.Context, m *handler.Message, attempt int) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(m.Value))
	if err != nil {
		return nil, err
	}
	h := make(http.Header, len(s.static)+len(s.files)+len(m.Headers)+14)
	for k, v := range s.static {
		h[k] = v
	}
	if len(s.files) > 0 {
		now := time.Now()
		for _, f := range s.files {
			h.Set(f.name, f.get(now))
		}
	}
	contentType := s.cfg.ContentType
	for _, rh := range m.Headers {
		v := string(rh.Value)
		if !validHeaderName(rh.Key) || !validHeaderValue(v) {
			continue
		}
		if strings.EqualFold(rh.Key, "content-type") && v != "" {
			contentType = v
		}
		h.Add("kafka-header-"+rh.Key, v)
	}
	h.Set("Content-Type", contentType)

	h.Set("ce-specversion", "1.0")
	h.Set("ce-id", ceEncode(fmt.Sprintf("%s-%d-%d", m.Topic, m.Partition, m.Offset)))
	h.Set("ce-source", ceEncode("wowd/"+m.Service+"/"+m.Dispatcher))
	h.Set("ce-type", ceEncode("wow."+m.Context+"."+m.Aggregate+"."+m.Kind.String()))
	h.Set("ce-subject", ceEncode(m.AggregateID))
	if !m.Timestamp.IsZero() {
		h.Set("ce-time", m.Timestamp.UTC().Format(time.RFC3339Nano))
	}
	if w := m.Wow; w != nil {
		setWowHeaders(h, m, w)
	}
	h.Set("kafka-topic", m.Topic)
	h.Set("kafka-partition", strconv.FormatInt(int64(m.Partition), 10))
	h.Set("kafka-offset", strconv.FormatInt(m.Offset, 10))
	if key := string(m.Key); utf8.ValidString(key) && validHeaderValue(key) {
		h.Set("kafka-key", key)
	} else {
		h.Set("kafka-key-base64", base64.StdEncoding.EncodeToString(m.Key))
	}
	h.Set("wowd-attempt", strconv.Itoa(attempt))
	req.Header = h
	return req, nil
}

// ceEncode percent-encodes a CloudEvents string attribute for an HTTP header
// (HTTP protocol binding, "HTTP Header Values"): space, double quote, percent
// and every byte outside printable ASCII.
func ceEncode(s string) string {
	const hex = "0123456789ABCDEF"
	n := 0
	for i := range len(s) {
		if ceEscape(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 2*n)
	for i := range len(s) {
		if c := s[i]; ceEscape(c) {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

func ceEscape(c byte) bool { return c <= ' ' || c >= 0x7f || c == '"' || c == '%' }

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
func validHeaderValue(s string) bool {
	for i := range len(s) {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// parseRetryAfter reads a Retry-After header value, delta-seconds or an HTTP
// date, as a wait from now, capped at maxRetryAfter.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseUint(v, 10, 64); err == nil {
		if secs >= uint64(maxRetryAfter/time.Second) {
			return maxRetryAfter, true
		}
		return time.Duration(secs) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), maxRetryAfter), true
	}
	return 0, false
}

// setWowHeaders adds what wowd decoded of a Wow message: the message id as
// ce-id, the command name as ce-type of a command, the creation time as
// ce-time, the routing fields and Wow's own header map (see HTTP.md).
func setWowHeaders(h http.Header, m *handler.Message, w *handler.Wow) {
	if w.ID != "" {
		h.Set("ce-id", ceEncode(w.ID))
	}
	if m.Kind == handler.KindCommand && w.Name != "" {
		h.Set("ce-type", ceEncode(w.Name))
	}
	if !w.CreateTime.IsZero() {
		h.Set("ce-time", w.CreateTime.UTC().Format(time.RFC3339Nano))
	}
	set := func(k, v string) {
		if v != "" && validHeaderValue(v) {
			h.Set(k, v)
		}
	}
	set("wow-context", w.ContextName)
	set("wow-aggregate", w.AggregateName)
	set("wow-tenant-id", w.TenantID)
	set("wow-request-id", w.RequestID)
	set("wow-command-id", w.CommandID)
	if w.HasVersion {
		h.Set("wow-version", strconv.FormatInt(w.Version, 10))
	}
	if len(w.Events) > 0 {
		set("wow-events", strings.Join(w.Events, ","))
	}
	for _, e := range w.Header {
		if validHeaderName(e.Key) && validHeaderValue(e.Value) {
			h.Set("wow-header-"+e.Key, e.Value)
		}
	}
}
