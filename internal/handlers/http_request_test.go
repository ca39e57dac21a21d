package handlers

import (
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/wowd/wowd/handler"
)

// TestHeaderNamesAreCanonical: newRequest sets these names as they are.
func TestHeaderNamesAreCanonical(t *testing.T) {
	for _, k := range []string{hdrContentType, hdrSpecVersion, hdrID, hdrSource, hdrType, hdrSubject, hdrTime,
		hdrWowContext, hdrWowAggregate, hdrWowTenant, hdrWowRequest, hdrWowCommand, hdrWowVersion, hdrWowEvents,
		hdrTopic, hdrPartition, hdrOffset, hdrKey, hdrKeyBase64, hdrAttempt, prefixKafkaHeader, prefixWowHeader} {
		if c := http.CanonicalHeaderKey(k); c != k {
			t.Errorf("%q is not canonical: %q", k, c)
		}
	}
	for _, k := range []string{"trace_id", "TRACE-ID", "x", "a-b-c", "-x", "x-", "a--b", "Content-type", "9lives", "a.b~c!d#e$f%g&h'i*j+k^l`m|n", "ÿ"} {
		if !validHeaderName(k) {
			continue
		}
		want := http.CanonicalHeaderKey(prefixWowHeader + k)
		if got := string(appendCanonicalKey([]byte(prefixWowHeader), k)); got != want {
			t.Errorf("%q: %q, want %q", k, got, want)
		}
	}
}

// TestRequestHeadersMatchTheReference builds the headers of varied messages
// and compares them with referenceHeaders.
func TestRequestHeadersMatchTheReference(t *testing.T) {
	created := time.Date(2025, 8, 22, 13, 16, 3, 12_000_000, time.FixedZone("CET", 3600))
	wow := func() *handler.Wow {
		return &handler.Wow{ID: "0U7K2nR8", Name: "add_cart_item", ContextName: "example-service", AggregateName: "cart",
			AggregateID: "cart-1", TenantID: "(0)", RequestID: "r-1", CommandID: "c-1", Version: 3, HasVersion: true,
			CreateTime: created, Events: []string{"cart_item_added", "cart_checked"},
			Header: []handler.WowHeader{{Key: "trace_id", Value: "t-9"}, {Key: "local_first", Value: "true"}}}
	}
	cases := map[string]func(m *handler.Message){
		"plain":     func(m *handler.Message) {},
		"timestamp": func(m *handler.Message) { m.Timestamp = created },
		"record headers": func(m *handler.Message) {
			m.Headers = []handler.Header{
				{Key: "trace_id", Value: []byte("abc")}, {Key: "content-type", Value: []byte("application/avro")},
				{Key: "Trace_ID", Value: []byte("again")}, {Key: "bad key", Value: []byte("x")},
				{Key: "x-ctl", Value: []byte("a\r\nb")}, {Key: "empty", Value: nil}, {Key: "CONTENT-TYPE", Value: nil},
			}
		},
		"binary key":  func(m *handler.Message) { m.Key = []byte{0xff, 0, 'a'} },
		"control key": func(m *handler.Message) { m.Key = []byte("a\nb") },
		"other key":   func(m *handler.Message) { m.Key = []byte("not-the-id") },
		"empty key":   func(m *handler.Message) { m.Key, m.AggregateID = nil, "" },
		"escaped fields": func(m *handler.Message) {
			m.AggregateID, m.Key = "cart 1/ü\"%", []byte("cart 1/ü\"%")
			m.Service = "svc é"
		},
		"large numbers": func(m *handler.Message) { m.Partition, m.Offset = 1234, 1<<40 },
		"unknown kind":  func(m *handler.Message) { m.Kind = 9 },
		"wow event":     func(m *handler.Message) { m.Wow = wow(); m.Wow.Name = "" },
		"wow command":   func(m *handler.Message) { m.Wow = wow(); m.Kind = handler.KindCommand },
		"wow state one event": func(m *handler.Message) {
			m.Wow = wow()
			m.Kind, m.Wow.Events, m.Wow.HasVersion = handler.KindState, []string{"only"}, false
		},
		"wow sparse": func(m *handler.Message) {
			m.Timestamp = created
			m.Wow = &handler.Wow{Events: []string{"a\nb"}, Header: []handler.WowHeader{
				{Key: "bad key", Value: "x"}, {Key: "k", Value: "v\n"}, {Key: "dup", Value: "1"}, {Key: "DUP", Value: "2"}}}
		},
		"wow escaped": func(m *handler.Message) {
			m.Wow = wow()
			m.Kind, m.Wow.ID, m.Wow.Name, m.Wow.TenantID = handler.KindCommand, "id 1", "name%", "t\x00"
		},
	}
	for _, static := range []map[string]any{nil, {"X-Tenant": "static", "X-Api-Key": "k"}} {
		s := build(t, "http", sinkConfig("http://127.0.0.1:1/wow", map[string]any{"headers": static}), handler.Deps{}).(*httpSink)
		for _, name := range slices.Sorted(maps.Keys(cases)) {
			m := testMessage(42)
			cases[name](m)
			for _, attempt := range []int{1, 12} {
				req, err := s.newRequest(context.Background(), m, attempt, s.live.Load())
				if err != nil {
					t.Fatal(err)
				}
				want := referenceHeaders(s, m, attempt)
				if !maps.EqualFunc(req.Header, want, slices.Equal) {
					t.Errorf("%s (static %v, attempt %d):\n got %v\nwant %v", name, static, attempt, req.Header, want)
				}
			}
		}
	}
}

// TestNewRequestAllocations keeps newRequest's allocations counted: the
// request, its body and header map, one string of text and one backing
// array of values.
func TestNewRequestAllocations(t *testing.T) {
	s := build(t, "http", sinkConfig("http://127.0.0.1:1/wow", nil), handler.Deps{}).(*httpSink)
	m := benchMessages()[3][7]
	m.Offset = 123456
	got := testing.AllocsPerRun(100, func() {
		if _, err := s.newRequest(context.Background(), m, 1, s.live.Load()); err != nil {
			t.Fatal(err)
		}
	})
	ref := testing.AllocsPerRun(100, func() { referenceHeaders(s, m, 1) })
	t.Logf("newRequest: %.0f allocations; the reference's headers alone: %.0f", got, ref)
	if got > 16 {
		t.Errorf("newRequest makes %.0f allocations, want at most 16", got)
	}
}

// referenceHeaders is the sink's request headers for attempt of m, built
// the plain way newRequest once built them: newRequest must build the same.
func referenceHeaders(s *httpSink, m *handler.Message, attempt int) http.Header {
	h := make(http.Header, len(s.static)+len(s.live.Load().files)+len(m.Headers)+14)
	for k, v := range s.static {
		h[k] = v
	}
	if len(s.live.Load().files) > 0 {
		now := time.Now()
		for _, f := range s.live.Load().files {
			h.Set(f.name, f.get(now))
		}
	}
	contentType := s.cfg.ContentType
	for _, rh := range m.Headers {
		v := string(rh.Value)
		if !validHeaderName(rh.Key) || !validHeaderValue(v) || !utf8.ValidString(v) ||
			len(rh.Key) > maxHeaderName || len(v) > maxHeaderValue {
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
		referenceWowHeaders(h, m, w)
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
	return h
}

// referenceWowHeaders adds what wowd decoded of a Wow message: the message id as
// ce-id, the command name as ce-type of a command, the creation time as
// ce-time, the routing fields and Wow's own header map (see HTTP.md).
func referenceWowHeaders(h http.Header, m *handler.Message, w *handler.Wow) {
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
		if v != "" && validHeaderValue(v) && utf8.ValidString(v) {
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
		if validHeaderName(e.Key) && validHeaderValue(e.Value) && utf8.ValidString(e.Value) &&
			len(e.Key) <= maxHeaderName && len(e.Value) <= maxHeaderValue {
			h.Set("wow-header-"+e.Key, e.Value)
		}
	}
}
