package handlers

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/handlerconfig"
)

const secretToken = "Bearer s3cr3t-t0ken"

// headerServer records the given header of every request.
func headerServer(t *testing.T, name string) (*httpSinkServer, string) {
	s := &httpSinkServer{}
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.got = append(s.got, r.Header.Values(name)...)
	})
	return s, srv.URL
}

type httpSinkServer struct {
	mu  sync.Mutex // guards got
	got []string
}

func (s *httpSinkServer) last(t *testing.T) string {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.got) == 0 {
		t.Fatal("no request")
	}
	return s.got[len(s.got)-1]
}

// post sends one message through h and waits for its success.
func post(t *testing.T, h handler.Handler, off int64) {
	t.Helper()
	acks := newAcks(t)
	h.Handle(context.Background(), testMessage(off), acks.ack(off))
	if err := acks.wait(t, off); err != nil {
		t.Fatalf("offset %d: %v", off, err)
	}
}

func TestHTTPHeaderFromEnv(t *testing.T) {
	t.Setenv("WOWD_TEST_SINK_TOKEN", "  "+secretToken+"\n")
	srv, url := headerServer(t, "Authorization")
	spec, _ := handler.Default().Lookup("http")
	cfg, err := handlerconfig.Decode(spec, sinkConfig(url, map[string]any{
		"headers-from-env": map[string]any{"authorization": "WOWD_TEST_SINK_TOKEN"},
	}))
	if err != nil {
		t.Fatal(err)
	}
	h := buildDecoded(t, cfg, handler.Deps{})
	post(t, h, 1)
	if got := srv.last(t); got != secretToken {
		t.Errorf("Authorization %q, want the trimmed variable", got)
	}
	// The configuration holds the variable's name only: config print and
	// the handler reference cannot show the value.
	if s := fmt.Sprintf("%+v", cfg); strings.Contains(s, "s3cr3t") || !strings.Contains(s, "WOWD_TEST_SINK_TOKEN") {
		t.Errorf("decoded configuration %s", s)
	}
}

func TestHTTPHeaderFromFileIsReadAgainWhenItChanges(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
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
	write("Bearer one\n", base)
	srv, url := headerServer(t, "Authorization")
	core, logs := observer.New(zapcore.WarnLevel)
	h := build(t, "http", sinkConfig(url, map[string]any{
		"headers-from-file": map[string]any{"Authorization": path},
	}), handler.Deps{Logger: zap.New(core)})
	f := h.(*httpSink).live.Load().files[0]
	f.mu.Lock()
	f.every, f.next = 0, time.Time{} // check the file on every request
	f.mu.Unlock()

	post(t, h, 1)
	if got := srv.last(t); got != "Bearer one" {
		t.Fatalf("Authorization %q", got)
	}
	write("Bearer two", base.Add(time.Second))
	post(t, h, 2)
	if got := srv.last(t); got != "Bearer two" {
		t.Fatalf("after a change: Authorization %q", got)
	}
	// Replaced by a symlink to another file (as Kubernetes secret volumes do),
	// same size and modification time.
	other := filepath.Join(dir, "token-v3")
	if err := os.WriteFile(other, []byte("Bearer six"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(other, base.Add(time.Second), base.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, path); err != nil {
		t.Fatal(err)
	}
	post(t, h, 3)
	if got := srv.last(t); got != "Bearer six" {
		t.Fatalf("after a symlink swap: Authorization %q", got)
	}
	// An unusable new version keeps the previous value, with a warning that
	// does not show the value.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	write("Bearer \x01bad", base.Add(2*time.Second))
	post(t, h, 4)
	if got := srv.last(t); got != "Bearer six" {
		t.Fatalf("after a bad version: Authorization %q", got)
	}
	entries := logs.All()
	if len(entries) != 1 || !strings.Contains(entries[0].Message, "keeping the previous value") {
		t.Fatalf("log %+v", entries)
	}
	for k, v := range entries[0].ContextMap() {
		if strings.Contains(fmt.Sprint(v), "bad") || strings.Contains(fmt.Sprint(v), "six") {
			t.Errorf("log field %s = %v shows a value", k, v)
		}
	}
	// A missing file keeps the value too.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	post(t, h, 5)
	if got := srv.last(t); got != "Bearer six" {
		t.Fatalf("without the file: Authorization %q", got)
	}
}

// TestHTTPFileHeaderFixedInPlaceIsReadAgain: a header file whose new
// version could not be used is read again at each check until it can, so
// a fix that leaves its size and modification time as they were (written
// in place within the same second; a mode fixed by chmod) is taken up,
// and the warning is logged once, not at every check. Before, a failed
// version was remembered as tried and the fix never read.
func TestHTTPFileHeaderFixedInPlaceIsReadAgain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	mtime := time.Now().Add(-time.Hour).Truncate(time.Second)
	write := func(v string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(v), 0o600); err != nil { // in place: the same file
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	write("Bearer one")
	core, logs := observer.New(zapcore.WarnLevel)
	f := &fileHeader{name: "Authorization", path: path, every: time.Second, log: zap.New(core)}
	now := time.Now()
	if err := f.load(now); err != nil {
		t.Fatal(err)
	}
	mtime = mtime.Add(time.Second)
	write("Bearer \x01ne") // the same size
	for i := 1; i <= 3; i++ {
		if got := f.get(now.Add(time.Duration(i) * time.Second)); got != "Bearer one" {
			t.Fatalf("with an unusable version: %q", got)
		}
	}
	if n := logs.Len(); n != 1 {
		t.Errorf("%d warnings for one unusable version, want 1", n)
	}
	write("Bearer two") // fixed in place: same size, same modification time
	if got := f.get(now.Add(4 * time.Second)); got != "Bearer two" {
		t.Fatalf("after the fix: %q, want the fixed value", got)
	}
}

// TestHTTPFileHeaderRemovedIsReported: a header file removed (a secret
// unmounted) keeps the value last read, as an unusable version does, and
// says so once; it was kept silently. Put back, it is read again.
func TestHTTPFileHeaderRemovedIsReported(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("Bearer one"), 0o600); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.WarnLevel)
	f := &fileHeader{name: "Authorization", path: path, every: time.Second, log: zap.New(core)}
	now := time.Now()
	if err := f.load(now); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if got := f.get(now.Add(time.Duration(i) * time.Second)); got != "Bearer one" {
			t.Fatalf("with the file removed: %q, want the value last read", got)
		}
	}
	if n := logs.FilterMessageSnippet("cannot be used").Len(); n != 1 {
		t.Errorf("%d warnings for the removed file, want 1", n)
	}
	if err := os.WriteFile(path, []byte("Bearer two"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := f.get(now.Add(4 * time.Second)); got != "Bearer two" {
		t.Errorf("put back: %q, want the new value", got)
	}
}

func TestHTTPFileHeaderChecksAtMostOncePerInterval(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := &fileHeader{name: "X-Token", path: path, every: time.Hour, log: zap.NewNop()}
	now := time.Now()
	if err := f.load(now); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("two, longer"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := f.get(now.Add(time.Minute)); got != "one" {
		t.Errorf("within the interval: %q", got)
	}
	if got := f.get(now.Add(time.Hour)); got != "two, longer" {
		t.Errorf("after the interval: %q", got)
	}
}

// TestHTTPHeaderSourceErrors checks that a missing or unusable source stops
// the sink from being built with an error naming the header and the source,
// never the value.
func TestHTTPHeaderSourceErrors(t *testing.T) {
	dir := t.TempDir()
	empty, bad, big := filepath.Join(dir, "empty"), filepath.Join(dir, "bad"), filepath.Join(dir, "big")
	for path, v := range map[string]string{
		empty: " \n",
		bad:   "s3cr3t\x00more",
		big:   strings.Repeat("s3cr3t", maxHeaderFile),
	} {
		if err := os.WriteFile(path, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("WOWD_TEST_EMPTY", "  ")
	t.Setenv("WOWD_TEST_BAD", "s3cr3t\r\nX-Injected: 1")
	for _, tc := range []struct {
		env, file map[string]any
		want      []string
	}{
		{env: map[string]any{"Authorization": "WOWD_TEST_UNSET"},
			want: []string{"headers-from-env.Authorization: environment variable WOWD_TEST_UNSET is not set"}},
		{env: map[string]any{"X-Key": "WOWD_TEST_EMPTY"},
			want: []string{"headers-from-env.X-Key: environment variable WOWD_TEST_EMPTY is empty"}},
		{env: map[string]any{"X-Key": "WOWD_TEST_BAD"},
			want: []string{"headers-from-env.X-Key: environment variable WOWD_TEST_BAD holds control characters"}},
		{file: map[string]any{"Authorization": filepath.Join(dir, "missing")},
			want: []string{"headers-from-file.Authorization: open " + filepath.Join(dir, "missing") + ": no such file"}},
		{file: map[string]any{"Authorization": empty}, want: []string{"headers-from-file.Authorization: " + empty + " is empty"}},
		{file: map[string]any{"Authorization": bad}, want: []string{"headers-from-file.Authorization: " + bad + " holds control characters"}},
		{file: map[string]any{"Authorization": big}, want: []string{"headers-from-file.Authorization: " + big + " is larger than"}},
		{env: map[string]any{"A": "WOWD_TEST_UNSET"}, file: map[string]any{"B": empty},
			want: []string{"headers-from-env.A:", "headers-from-file.B:"}},
	} {
		spec, _ := handler.Default().Lookup("http")
		raw := map[string]any{"url": "http://127.0.0.1:1/"}
		if tc.env != nil {
			raw["headers-from-env"] = tc.env
		}
		if tc.file != nil {
			raw["headers-from-file"] = tc.file
		}
		cfg, err := handlerconfig.Decode(spec, raw)
		if err != nil {
			t.Fatal(err)
		}
		h, err := spec.New(cfg, handler.Deps{})
		if err == nil {
			_ = h.(handler.Closer).Close(context.Background())
			t.Errorf("%v: no error", raw)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q lacks %q", err, w)
			}
		}
		if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("error %q shows the value", err)
		}
	}
}

func TestHTTPHeaderSourcesInSpec(t *testing.T) {
	t.Setenv("WOWD_TEST_SINK_TOKEN", secretToken)
	spec, _ := handler.Default().Lookup("http")
	for _, f := range handlerconfig.Fields(spec) {
		if strings.Contains(f.Default, "s3cr3t") || strings.Contains(f.Description, "s3cr3t") {
			t.Errorf("field %+v shows the value", f)
		}
		switch f.Name {
		case "headers-from-env", "headers-from-file":
			if f.Default != "" || f.Secret || f.Type != "map of string" {
				t.Errorf("field %+v", f)
			}
		}
	}
}

// buildDecoded builds the http sink from a decoded configuration, closing it
// at the end of the test.
func buildDecoded(t *testing.T, cfg any, deps handler.Deps) handler.Handler {
	t.Helper()
	spec, _ := handler.Default().Lookup("http")
	h, err := spec.New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.(handler.Closer).Close(context.Background()) })
	return h
}
