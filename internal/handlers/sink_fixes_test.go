package handlers

// Tests of batched delivery, the rate limiter's reload, request building
// and Retry-After, each for a defect a review found.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/wowd/wowd/handler"
)

// A batch body is JSON, which RFC 8259 (8.1) requires to be UTF-8: a
// message whose value passes json.Valid but holds invalid UTF-8 in a
// string (a Latin-1 "café" under a JSON content type) must not make the
// whole batch invalid JSON, which a strict server refuses (400: every
// member of the batch dead-lettered). json.Valid does not check UTF-8.
func TestBatchBodyIsValidUTF8(t *testing.T) {
	var (
		mu     sync.Mutex // guards bodies
		bodies [][]byte
	)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, b)
		mu.Unlock()
	})
	h := build(t, "http", sinkConfig(srv.URL, map[string]any{
		"batch": map[string]any{"max-messages": 2, "linger": "1s"},
	}), handler.Deps{})
	a := newAcks(t)
	good := batchMessage(0, "cart-0")
	latin1 := batchMessage(1, "cart-1")
	latin1.Value = []byte("{\"name\":\"caf\xe9\"}") // content-type application/json (the default)
	h.Handle(context.Background(), good, a.ack(0))
	h.Handle(context.Background(), latin1, a.ack(1))
	for off := range int64(2) {
		if err := a.wait(t, off); err != nil {
			t.Fatalf("message %d: %v", off, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, b := range bodies {
		if !utf8.Valid(b) {
			at := 0
			for r, n := utf8.DecodeRune(b); r != utf8.RuneError || n != 1; r, n = utf8.DecodeRune(b[at:]) {
				at += n
			}
			t.Errorf("batch request %d: body is not UTF-8, so not JSON text (RFC 8259 8.1): %q at byte %d", i, b[max(at-20, 0):min(at+10, len(b))], at)
		}
	}
}

// arrivalTransport answers every request 204 and records when it came.
type arrivalTransport struct{ arrivals }

func (a *arrivalTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, req.Body)
	a.add()
	return &http.Response{StatusCode: http.StatusNoContent, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

// A reload of rate-limit never lets more requests through than the rate
// allows: the attempts waiting on the old schedule and the ones starting
// after the reload share one limiter. A new limiter ran alongside the old
// one (with a fresh burst), and lowering the rate from 10/s to 5/s let 15
// requests through in the next second.
func TestRateReloadKeepsTheRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conf := func(rate float64) map[string]any {
			return sinkConfig("http://127.0.0.1:1/wow", map[string]any{"rate-limit": rate, "rate-burst": 1})
		}
		s := build(t, "http", conf(10), handler.Deps{}).(*httpSink)
		rt := &arrivalTransport{}
		s.client.Transport = redirectGuard{next: rt}
		acks := newAcks(t)
		for off := range int64(20) { // two seconds of requests at 10/s
			s.Handle(context.Background(), testMessage(off), acks.ack(off))
		}
		time.Sleep(50 * time.Millisecond)
		apply, err := s.Reconfigure(decodeSink(t, conf(5)))
		if err != nil {
			t.Fatal(err)
		}
		apply()
		reload := time.Now()
		for off := int64(20); off < 30; off++ {
			s.Handle(context.Background(), testMessage(off), acks.ack(off))
		}
		for off := range int64(30) {
			if err := acks.wait(t, off); err != nil {
				t.Fatalf("message %d: %v", off, err)
			}
		}
		n := 0
		for _, at := range rt.times() {
			if !at.Before(reload) && at.Before(reload.Add(time.Second)) {
				n++
			}
		}
		// The old configuration allows 10+1 in a second, the new one 5+1.
		if n > 11 {
			t.Errorf("%d requests in the second after rate-limit was lowered from 10/s to 5/s (burst 1): more than either allows", n)
		}
	})
}

// A Kafka key is bytes: it reaches the server whole, as kafka-key or, when
// a header cannot carry it, kafka-key-base64. HTTP strips white space
// around a field value (RFC 9110 5.5; HTTP/2 even forbids it, RFC 9113
// 8.2.1), so a key with a leading or trailing space or tab, printable
// UTF-8, arrives changed.
func TestKafkaKeyArrivesWhole(t *testing.T) {
	got := make(chan []byte, 1)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if b64 := r.Header.Get("Kafka-Key-Base64"); b64 != "" {
			k, err := base64.StdEncoding.DecodeString(b64)
			if err != nil {
				t.Errorf("kafka-key-base64 %q: %v", b64, err)
			}
			got <- k
			return
		}
		got <- []byte(r.Header.Get("Kafka-Key"))
	})
	h := build(t, "http", sinkConfig(srv.URL, nil), handler.Deps{})
	for i, key := range []string{" cart-1", "cart-1 ", "\tcart-1"} {
		m := testMessage(int64(i))
		m.Key = []byte(key)
		a := newAcks(t)
		h.Handle(context.Background(), m, a.ack(int64(i)))
		if err := a.wait(t, int64(i)); err != nil {
			t.Fatal(err)
		}
		if k := <-got; string(k) != key {
			t.Errorf("key %q reached the server as %q", key, k)
		}
	}
}

// A configured header that shares its name with a header the sink sets
// from the message (wow-tenant-id, traceparent, ...) was overridden by the
// message's in binary mode, while in batch mode the event left the
// attribute out altogether: every event of a batch lost the message's
// tenant. Such names are refused (or, were they ever allowed, the two
// modes must agree).
func TestConfiguredHeaderCannotHideAnEventAttribute(t *testing.T) {
	cfg := defaultHTTPConfig()
	cfg.URL = "http://127.0.0.1:1/wow"
	cfg.Headers = map[string]string{"Wow-Tenant-Id": "acme"}
	cfg.Batch.MaxMessages = 10
	if err := cfg.Validate(); err != nil {
		return // refused: the fix chosen was to reserve the name
	}
	s, err := newHTTPSink(*cfg, handler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close(context.Background()) }()
	m := testMessage(1)
	m.Wow = &handler.Wow{ID: "0ZX4", ContextName: "example", AggregateName: "cart", TenantID: "tenant-9"}
	req, err := s.newRequest(context.Background(), m, 1, s.live.Load())
	if err != nil {
		t.Fatal(err)
	}
	ev, _, err := s.encodeEvent(context.Background(), m, 1, s.live.Load())
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(ev, &got); err != nil {
		t.Fatal(err)
	}
	if bin := req.Header.Get("Wow-Tenant-Id"); got["wowtenantid"] != bin {
		t.Errorf("binary mode sends wow-tenant-id %q, the batch event's wowtenantid is %v", bin, got["wowtenantid"])
	}
}

// Retry-After in delta-seconds too large for a uint64 is a very long
// wait: it is capped at 5 minutes like any other long one, not ignored
// (which retries after backoff-initial, 200ms by default).
func TestRetryAfterHugeIsCapped(t *testing.T) {
	now := time.Now()
	for _, v := range []string{"18446744073709551616", "99999999999999999999999999"} {
		if d, ok := parseRetryAfter(v, now); !ok || d != maxRetryAfter {
			t.Errorf("Retry-After: %s gives %v, %v; want %v, true", v, d, ok, maxRetryAfter)
		}
	}
}

// A reload that raises rate-limit also serves the attempts already waiting
// for the limiter: with rate-limit 0.01 (a slot per 100s) raised to
// 1000/s, the attempts that had reserved slots 100s and 200s ahead kept
// waiting for them while new attempts went at once.
func TestRateReloadServesOldWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conf := func(rate float64) map[string]any {
			return sinkConfig("http://127.0.0.1:1/wow", map[string]any{"rate-limit": rate, "rate-burst": 1})
		}
		s := build(t, "http", conf(0.01), handler.Deps{}).(*httpSink)
		rt := &arrivalTransport{}
		s.client.Transport = redirectGuard{next: rt}
		acks := newAcks(t)
		for off := range int64(3) {
			s.Handle(context.Background(), testMessage(off), acks.ack(off))
		}
		synctest.Wait()
		apply, err := s.Reconfigure(decodeSink(t, conf(1000)))
		if err != nil {
			t.Fatal(err)
		}
		apply()
		s.Handle(context.Background(), testMessage(3), acks.ack(3))
		time.Sleep(time.Second)
		synctest.Wait()
		if n := len(rt.times()); n != 4 {
			t.Errorf("%d of 4 requests sent in the second after rate-limit was raised from 0.01/s to 1000/s", n)
		}
	}) // Close, at cleanup, acknowledges the ones still waiting
}
