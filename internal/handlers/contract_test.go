package handlers

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/wowd/wowd/handler"
)

// TestRedirectsAreFollowedUpToTenHops (found by review): HTTP.md's
// response → action table says
// "307, 308 to the same scheme and host | followed (up to 10 hops); the
// final response decides". An endpoint that redirects 10 times (10 hops,
// 11 requests) before answering 200 fails the message permanently with
// "status 307": checkRedirect stops at len(via) >= maxRedirects, i.e.
// after 9 hops (10 requests).
func TestRedirectsAreFollowedUpToTenHops(t *testing.T) {
	const hops = 10
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/hop"))
		if n < hops {
			http.Redirect(w, r, fmt.Sprintf("/hop%d", n+1), http.StatusTemporaryRedirect)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	h := build(t, "http", sinkConfig(srv.URL+"/hop0", map[string]any{"max-attempts": 1}), handler.Deps{})
	acks := newAcks(t)
	h.Handle(context.Background(), testMessage(1), acks.ack(1))
	if err := acks.wait(t, 1); err != nil {
		t.Fatalf("%d same-origin 307 hops, then 200: %v (HTTP.md: followed up to 10 hops)", hops, err)
	}
}

// TestHeaderValuesWithWhiteSpaceAtAnEndAreLeftOut (found by review):
// HTTP.md says a record header
// goes as kafka-header-<name> (and a Wow header as wow-header-<key>), and
// lists when one is left out. A value with surrounding white space is
// neither left out nor delivered as it is: passable lets it through and
// HTTP/1.1 trims it (HTTP/2 calls such a field malformed, RFC 9113
// 8.2.1), the very reason the sink base64-encodes such a Kafka key
// (trimmedByHTTP).
func TestHeaderValuesWithWhiteSpaceAtAnEndAreLeftOut(t *testing.T) {
	const value = "  padded  "
	var mu sync.Mutex
	got := map[string][]string{}
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range []string{"Kafka-Header-X-Note", "Wow-Header-Note"} {
			if vs := r.Header.Values(k); len(vs) > 0 {
				got[k] = slices.Clone(vs)
			}
		}
	})
	h := build(t, "http", sinkConfig(srv.URL, nil), handler.Deps{})
	acks := newAcks(t)
	m := testMessage(1)
	m.Headers = []handler.Header{{Key: "x-note", Value: []byte(value)}}
	m.Wow = &handler.Wow{ID: "w1", ContextName: "example", AggregateName: "cart", AggregateID: "cart-1",
		Header: []handler.WowHeader{{Key: "note", Value: value}}}
	h.Handle(context.Background(), m, acks.ack(1))
	if err := acks.wait(t, 1); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for k, vs := range got {
		if len(vs) != 1 || vs[0] != value {
			t.Errorf("%s arrived as %q: neither %q nor left out", k, vs, value)
		}
	}
}

// TestLiteralHeaderValuesAreTrimmed (found by review): HTTP.md, "Secret
// headers":
// "`headers` holds literal values ... Values are trimmed of surrounding
// white space." headers-from-env and headers-from-file are (headerValue),
// but staticHeaders sets a literal `headers` value as written, so it goes
// out with its spaces (seen here over h2c, where nothing trims it on the
// way; a strict HTTP/2 server refuses such a field as malformed).
func TestLiteralHeaderValuesAreTrimmed(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Values("X-Token")
		mu.Unlock()
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	h := build(t, "http", sinkConfig(srv.URL, map[string]any{
		"h2c": true, "headers": map[string]any{"X-Token": " Bearer abc "}}), handler.Deps{})
	acks := newAcks(t)
	h.Handle(context.Background(), testMessage(1), acks.ack(1))
	if err := acks.wait(t, 1); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != "Bearer abc" {
		t.Fatalf("X-Token sent as %q, want %q (HTTP.md: values are trimmed)", got, "Bearer abc")
	}
}

// TestAttemptNumbersGoOnAcrossHeldTries (found by review): HTTP.md says
// wowd-attempt is "1 for the first attempt, 2 for the first retry, and so
// on", and docs/operations.md that it "tells retries of the same delivery
// apart". When the sink's attempts run out while dead letters are disabled
// or the receiver backs off (the sink is down), the receiver holds the
// message and calls Handle again with the same *Message; the sink counted
// from 1 again (1, 2, 1, 2). The receiver now gives the attempts of the
// earlier tries in the try's context (handler.AttemptsBefore; see
// TestAttemptsAreNumberedAcrossHeldTries in internal/receiver), as here.
func TestAttemptNumbersGoOnAcrossHeldTries(t *testing.T) {
	var mu sync.Mutex
	var attempts []string
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		attempts = append(attempts, r.Header.Get("Wowd-Attempt"))
		mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	h := build(t, "http", sinkConfig(srv.URL, map[string]any{"max-attempts": 2}), handler.Deps{})
	m := testMessage(1)
	before := 0
	for range 2 { // the first try, then the receiver's retry of the held message
		acks := newAcks(t)
		ctx := context.Background()
		if before > 0 {
			ctx = context.WithValue(ctx, handler.AttemptsBeforeKey{}, before)
		}
		h.Handle(ctx, m, acks.ack(1))
		err := acks.wait(t, 1)
		wantClass(t, err, handler.Transient)
		before += handler.Attempts(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"1", "2", "3", "4"}; !slices.Equal(attempts, want) {
		t.Fatalf("wowd-attempt of one delivery: %q, want %q: retries not told apart", attempts, want)
	}
}
