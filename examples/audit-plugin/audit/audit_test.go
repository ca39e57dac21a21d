package audit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/handler/handlertest"
)

// targetOut is an appender that calls the conformance suite's target where
// the file would be written.
type targetOut struct {
	call func(ctx context.Context, m *handler.Message) error

	mu    sync.Mutex // guards lines
	lines []string
}

func (o *targetOut) Append(ctx context.Context, m *handler.Message, line []byte) error {
	if err := o.call(ctx, m); err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.lines = append(o.lines, string(line))
	return nil
}

func (o *targetOut) Close() error { return nil }

func TestConformance(t *testing.T) {
	handlertest.Run(t, func(t *testing.T, target handlertest.Target) handler.Handler {
		h := &Handler{out: &targetOut{call: target.Call}, now: time.Now}
		return handler.WithRetry(h, handler.RetryPolicy{MaxAttempts: 3, Initial: time.Millisecond, Max: 5 * time.Millisecond})
	})
}

func TestAppendsLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	if err := os.WriteFile(path, []byte("kept\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	spec := Spec()
	cfg, err := handlertest.Decode(spec, map[string]any{"path": path, "fsync": true})
	if err != nil {
		t.Fatal(err)
	}
	h, err := spec.New(cfg, handler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	if b, ok := h.(handler.Blocker); !ok || !b.Blocking() {
		t.Error("the audit handler must say it blocks")
	}
	m := &handler.Message{
		Service: "cart-service", Dispatcher: "audit", Context: "example", Aggregate: "cart",
		Kind: handler.KindEvent, AggregateID: "cart-1", Topic: "wow.example.cart.event",
		Partition: 2, Offset: 41, Value: []byte("hello"),
		Timestamp: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC),
	}
	for range 2 {
		done := make(chan error, 1)
		h.Handle(context.Background(), m, handler.AckFunc(func(err error) { done <- err }))
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if err := h.(handler.Closer).Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	h.Handle(context.Background(), m, handler.AckFunc(func(err error) { done <- err }))
	if err := <-done; !errors.Is(err, handler.ErrClosed) {
		t.Errorf("after close: %v", err)
	}

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) != 3 || lines[0] != "kept" {
		t.Fatalf("file:\n%s", strings.Join(lines, "\n"))
	}
	var l Line
	if err := json.Unmarshal([]byte(lines[1]), &l); err != nil {
		t.Fatal(err)
	}
	want := Line{
		Written: l.Written, Service: "cart-service", Dispatcher: "audit", Context: "example", Aggregate: "cart",
		Kind: "event", AggregateID: "cart-1", Topic: "wow.example.cart.event", Partition: 2, Offset: 41,
		RecordTime: m.Timestamp, Size: 5,
		SHA256: "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824",
	}
	if l != want || time.Since(l.Written) > time.Minute {
		t.Errorf("line\n got %+v\nwant %+v", l, want)
	}
}

func TestConfigErrors(t *testing.T) {
	spec := Spec()
	for _, tc := range []struct {
		raw  map[string]any
		want string
	}{
		{map[string]any{}, "path: required"},
		{map[string]any{"path": "/x", "max-attempts": -1}, "max-attempts"},
		{map[string]any{"path": "/x", "sync": true}, "sync"},
	} {
		if _, err := handlertest.Decode(spec, tc.raw); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.raw, err, tc.want)
		}
	}
	cfg, err := handlertest.Decode(spec, map[string]any{"path": filepath.Join(t.TempDir(), "no", "such", "dir")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := spec.New(cfg, handler.Deps{}); err == nil || !strings.HasPrefix(err.Error(), "path: open ") {
		t.Errorf("unwritable path: %v", err)
	}
}
