package handlers

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/handlerconfig"
	"github.com/wowd/wowd/internal/testwait"
)

// decodeSink decodes raw as the http sink's configuration.
func decodeSink(t *testing.T, raw map[string]any) any {
	t.Helper()
	spec, _ := handler.Default().Lookup("http")
	cfg, err := handlerconfig.Decode(spec, raw)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestHTTPReconfigureConcurrency checks that a raised max-concurrency
// starts the attempts queued behind the old limit at once, and that a
// lowered one bounds the requests that follow.
func TestHTTPReconfigureConcurrency(t *testing.T) {
	var inFlight, peak atomic.Int32
	var mu sync.Mutex // guards release
	release := make(chan struct{})
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		mu.Lock()
		ch := release
		mu.Unlock()
		hang(r, ch)
	})
	h := build(t, "http", sinkConfig(srv.URL, map[string]any{"max-concurrency": 1}), handler.Deps{})
	s := h.(*httpSink)
	acks := newAcks(t)
	for off := range int64(4) {
		h.Handle(context.Background(), testMessage(off), acks.ack(off))
	}
	testwait.For(t, 10*time.Second, "one request in flight", func() bool { return inFlight.Load() == 1 })

	apply, err := s.Reconfigure(decodeSink(t, sinkConfig(srv.URL, map[string]any{"max-concurrency": 4})))
	if err != nil {
		t.Fatal(err)
	}
	apply()
	testwait.For(t, 10*time.Second, "the queued requests started after the limit was raised",
		func() bool { return inFlight.Load() == 4 })
	mu.Lock()
	close(release)
	release = make(chan struct{})
	mu.Unlock()
	for off := range int64(4) {
		if err := acks.wait(t, off); err != nil {
			t.Fatalf("offset %d: %v", off, err)
		}
	}

	apply, err = s.Reconfigure(decodeSink(t, sinkConfig(srv.URL, map[string]any{"max-concurrency": 2})))
	if err != nil {
		t.Fatal(err)
	}
	apply()
	peak.Store(0)
	for off := int64(4); off < 10; off++ {
		h.Handle(context.Background(), testMessage(off), acks.ack(off))
	}
	testwait.For(t, 10*time.Second, "two requests in flight", func() bool { return inFlight.Load() == 2 })
	mu.Lock()
	close(release)
	mu.Unlock()
	for off := int64(4); off < 10; off++ {
		if err := acks.wait(t, off); err != nil {
			t.Fatalf("offset %d: %v", off, err)
		}
	}
	if p := peak.Load(); p > 2 {
		t.Errorf("%d requests in flight at once after the limit was lowered to 2", p)
	}
}

// TestHTTPReconfigureHeaderFiles checks that a new headers-from-file path
// is read and sent, and that one that cannot be read is refused, leaving
// the sink as it was; and that a request-timeout that no longer fits the
// dispatcher's handler.timeout is refused.
func TestHTTPReconfigureHeaderFiles(t *testing.T) {
	dir := t.TempDir()
	for name, tok := range map[string]string{"a": "Bearer one", "b": "Bearer two\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan string, 10)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) { got <- r.Header.Get("Authorization") })
	conf := func(file string, over map[string]any) map[string]any {
		raw := sinkConfig(srv.URL, over)
		raw["headers-from-file"] = map[string]any{"Authorization": filepath.Join(dir, file)}
		return raw
	}
	h := build(t, "http", conf("a", nil), handler.Deps{Timeout: time.Minute})
	s := h.(*httpSink)
	acks := newAcks(t)
	send := func(off int64) string {
		h.Handle(context.Background(), testMessage(off), acks.ack(off))
		if err := acks.wait(t, off); err != nil {
			t.Fatal(err)
		}
		return <-got
	}
	if v := send(0); v != "Bearer one" {
		t.Fatalf("first token %q", v)
	}
	if _, err := s.Reconfigure(decodeSink(t, conf("missing", nil))); err == nil || !strings.Contains(err.Error(), "headers-from-file.Authorization") {
		t.Errorf("unreadable header file: %v", err)
	}
	if _, err := s.Reconfigure(decodeSink(t, conf("b", map[string]any{"request-timeout": "2m"}))); err == nil || !strings.Contains(err.Error(), "request-timeout") {
		t.Errorf("request-timeout past handler.timeout: %v", err)
	}
	if v := send(1); v != "Bearer one" {
		t.Fatalf("token after refused reloads %q", v)
	}
	apply, err := s.Reconfigure(decodeSink(t, conf("b", map[string]any{"request-timeout": "30s"})))
	if err != nil {
		t.Fatal(err)
	}
	apply()
	if v := send(2); v != "Bearer two" {
		t.Fatalf("token after the reload %q", v)
	}
	if rt := s.live.Load().requestTimeout; rt != 30*time.Second {
		t.Errorf("request-timeout %v after the reload", rt)
	}
}

// A reload that renames a headers-from-file header while a message's batch
// event is being encoded must not put the header's value into the event:
// the event leaves out the configured headers of the settings it was
// encoded with, the ones whose headers it was built from. The reload lands
// in the middle of the encoding: the header file changed, so building the
// message's headers reads it again, and the debug line saying so is the
// hook that applies the reload.
func TestHTTPReloadWhileEncodingKeepsSecretsOutOfTheBatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	write := func(v string, mtime time.Time) {
		t.Helper()
		if err := os.WriteFile(path, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	base := time.Now().Add(-time.Hour)
	write("s3cret-one", base)
	type request struct {
		header http.Header
		body   []byte
	}
	got := make(chan request, 4)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- request{r.Header.Clone(), body}
		w.WriteHeader(http.StatusNoContent)
	})
	conf := func(header string) map[string]any {
		raw := sinkConfig(srv.URL, map[string]any{"batch": map[string]any{"max-messages": 1}})
		raw["headers-from-file"] = map[string]any{header: path}
		return raw
	}

	var (
		s        *httpSink
		handling atomic.Bool  // set while Handle runs: the event is encoded in it
		reloads  atomic.Int32 // reloads applied by the hook
		inHandle atomic.Bool  // the reload was applied while Handle ran
	)
	core, _ := observer.New(zapcore.DebugLevel)
	core = zapcore.RegisterHooks(core, func(e zapcore.Entry) error {
		if e.Message != "header file read again" || reloads.Add(1) != 1 {
			return nil
		}
		inHandle.Store(handling.Load())
		apply, err := s.Reconfigure(decodeSink(t, conf("X-Api-Key")))
		if err != nil {
			t.Error(err)
			return nil
		}
		apply()
		return nil
	})
	s = build(t, "http", conf("X-Token"), handler.Deps{Logger: zap.New(core)}).(*httpSink)
	f := s.live.Load().files[0]
	f.mu.Lock()
	f.every, f.next = 0, time.Time{} // check the file on every request
	f.mu.Unlock()
	write("s3cret-two", base.Add(time.Second))

	acks := newAcks(t)
	handling.Store(true)
	s.Handle(context.Background(), testMessage(0), acks.ack(0))
	handling.Store(false)
	if err := acks.wait(t, 0); err != nil {
		t.Fatal(err)
	}
	if n := reloads.Load(); n != 1 || !inHandle.Load() {
		t.Fatalf("the reload was not applied while the event was encoded (%d reloads, in Handle: %v)", n, inHandle.Load())
	}
	r := <-got
	if bytes.Contains(r.body, []byte("s3cret")) {
		t.Errorf("the batch body carries the header file's secret:\n%s", r.body)
	}
	if v := r.header.Get("X-Api-Key"); v != "s3cret-two" {
		t.Errorf("X-Api-Key %q on the batch request, made after the reload", v)
	}
}

// An attempt makes its request with the settings it started with: one
// that waits for the rate limiter while a reload is applied sends the old
// headers-from-file names with the old request-timeout, as the limiter it
// waited for is the old one; the next attempt gets the new settings. Each
// request is seen by the client's transport, under a fake clock, so its
// deadline tells its request-timeout exactly.
func TestHTTPAttemptKeepsItsSettingsAcrossAReload(t *testing.T) {
	for _, batched := range []bool{false, true} {
		name := "single"
		if batched {
			name = "batched"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { testAttemptKeepsItsSettings(t, batched) })
		})
	}
}

// sentRequest is what a test transport saw of a request.
type sentRequest struct {
	header  http.Header
	timeout time.Duration // left until its deadline when it was sent
}

// recordingTransport answers every request 204 and records it.
type recordingTransport struct {
	mu   sync.Mutex // guards sent
	sent []sentRequest
}

func (rt *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, req.Body)
	var left time.Duration
	if dl, ok := req.Context().Deadline(); ok {
		left = time.Until(dl)
	}
	rt.mu.Lock()
	rt.sent = append(rt.sent, sentRequest{req.Header.Clone(), left})
	rt.mu.Unlock()
	return &http.Response{StatusCode: http.StatusNoContent, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

func (rt *recordingTransport) requests() []sentRequest {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return slices.Clone(rt.sent)
}

func testAttemptKeepsItsSettings(t *testing.T, batched bool) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := func(header, timeout string, rate float64) map[string]any {
		raw := sinkConfig("http://127.0.0.1:1/wow", map[string]any{
			"request-timeout": timeout, "rate-limit": rate, "rate-burst": 1,
		})
		raw["headers-from-file"] = map[string]any{header: path}
		if batched {
			raw["batch"] = map[string]any{"max-messages": 1}
		}
		return raw
	}
	s := build(t, "http", conf("X-Token", "1m", 1), handler.Deps{}).(*httpSink)
	rt := &recordingTransport{}
	s.client.Transport = redirectGuard{next: rt}

	acks := newAcks(t)
	s.Handle(context.Background(), batchMessage(0, "a"), acks.ack(0)) // takes the burst
	if err := acks.wait(t, 0); err != nil {
		t.Fatal(err)
	}
	s.Handle(context.Background(), batchMessage(1, "b"), acks.ack(1)) // waits a second for the limiter
	synctest.Wait()
	if n := len(rt.requests()); n != 1 {
		t.Fatalf("%d requests sent before the limiter's wait ended, want 1", n)
	}
	apply, err := s.Reconfigure(decodeSink(t, conf("X-Api-Key", "2m", 1000)))
	if err != nil {
		t.Fatal(err)
	}
	apply()
	if err := acks.wait(t, 1); err != nil {
		t.Fatal(err)
	}
	s.Handle(context.Background(), batchMessage(2, "c"), acks.ack(2)) // starts after the reload
	if err := acks.wait(t, 2); err != nil {
		t.Fatal(err)
	}

	type settings struct {
		header  string
		timeout time.Duration
	}
	want := []settings{{"X-Token", time.Minute}, {"X-Token", time.Minute}, {"X-Api-Key", 2 * time.Minute}}
	sent := rt.requests()
	if len(sent) != len(want) {
		t.Fatalf("%d requests, want %d", len(sent), len(want))
	}
	for i, r := range sent {
		var got settings
		for _, h := range []string{"X-Token", "X-Api-Key"} {
			if r.header.Get(h) != "" {
				got.header += h
			}
		}
		got.timeout = r.timeout
		if got != want[i] {
			t.Errorf("request %d: header file sent as %q with request-timeout %v; want %q with %v",
				i, got.header, got.timeout, want[i].header, want[i].timeout)
		}
	}
}

// TestHTTPReconfigureFitsTheRunningBatch: batch.linger and
// batch.max-messages take a restart, so a reload's new request-timeout
// must fit the handler.timeout with the linger the sink still batches
// with. A file lowering the linger (or turning batching off) and raising
// request-timeout was checked with its own linger: the new timeout was
// applied, a batch member could then wait 3 s and its request 8.5 s in a
// 10 s try, and a slow request that succeeded had its try timed out (the
// message delivered again, maybe parked though handled). The reverse, a
// file raising the linger past what the running timeout allows, does not
// refuse a request-timeout that fits with the running linger.
func TestHTTPReconfigureFitsTheRunningBatch(t *testing.T) {
	h := build(t, "http", sinkConfig("http://127.0.0.1:1/", map[string]any{
		"request-timeout": "5s",
		"batch":           map[string]any{"max-messages": 10, "linger": "3s"},
	}), handler.Deps{Timeout: 10 * time.Second})
	s := h.(*httpSink)
	for name, batch := range map[string]map[string]any{
		"linger lowered":   {"max-messages": 10, "linger": "1s"},
		"batching dropped": {"max-messages": 0},
	} {
		_, err := s.Reconfigure(decodeSink(t, sinkConfig("http://127.0.0.1:1/", map[string]any{
			"request-timeout": "8500ms",
			"batch":           batch,
		})))
		if err == nil || !strings.Contains(err.Error(), "batch.linger: 3s") {
			t.Errorf("%s: request-timeout 8.5s beside the running linger of 3s in a 10s try: %v, want a refusal naming the running linger", name, err)
		}
	}
	apply, err := s.Reconfigure(decodeSink(t, sinkConfig("http://127.0.0.1:1/", map[string]any{
		"request-timeout": "6s",
		"batch":           map[string]any{"max-messages": 10, "linger": "30s"},
	})))
	if err != nil {
		t.Fatalf("request-timeout 6s beside the running linger of 3s, the file's 30s for a restart: %v", err)
	}
	apply()
	if got := s.live.Load().requestTimeout; got != 6*time.Second {
		t.Errorf("request-timeout %v after the reload, want 6s", got)
	}
}

// TestHTTPReconfigureKeepsAHeaderFileItReads: the sink keeps a header
// file's last good value while the file cannot be used (a token being
// rotated), and a reload that leaves that header as it is must not read
// the file again and be refused for it: lowering rate-limit or changing
// max-concurrency during an incident waited for the token file.
func TestHTTPReconfigureKeepsAHeaderFileItReads(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(tok, []byte("Bearer a"), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := func(conc int, header string) map[string]any {
		return sinkConfig("http://127.0.0.1:1/", map[string]any{"max-concurrency": conc, "headers-from-file": map[string]any{header: tok}})
	}
	s := build(t, "http", conf(1, "Authorization"), handler.Deps{}).(*httpSink)
	if err := os.WriteFile(tok, nil, 0o600); err != nil { // emptied mid-rotation
		t.Fatal(err)
	}
	apply, err := s.Reconfigure(decodeSink(t, conf(4, "authorization")))
	if err != nil {
		t.Fatalf("max-concurrency reload with the header file unchanged: %v", err)
	}
	apply()
	l := s.live.Load()
	if l.maxConcurrency != 4 || len(l.files) != 1 || l.files[0].get(time.Now()) != "Bearer a" {
		t.Errorf("after the reload: max-concurrency %d, %d header files, want 4 and the file's last good value", l.maxConcurrency, len(l.files))
	}
	// The same file under another header is a new header: read, refused.
	if _, err := s.Reconfigure(decodeSink(t, conf(4, "X-Token"))); err == nil || !strings.Contains(err.Error(), "headers-from-file.X-Token") {
		t.Errorf("the emptied file named for a new header: %v, want a refusal naming it", err)
	}
}
