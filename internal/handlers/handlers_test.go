package handlers

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/handlerconfig"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRegister(t *testing.T) {
	var r handler.Registry
	Register(&r)
	want := []string{"discard", "http", "log"}
	if got := r.Names(); !slices.Equal(got, want) {
		t.Fatalf("names %v, want %v", got, want)
	}
	for _, name := range want {
		if _, ok := handler.Default().Lookup(name); !ok {
			t.Errorf("default registry lacks %q", name)
		}
	}
}

func TestDiscardAcksNil(t *testing.T) {
	h := build(t, "discard", nil, handler.Deps{})
	acks := newAcks(t)
	h.Handle(context.Background(), testMessage(0), acks.ack(0))
	if err := acks.wait(t, 0); err != nil {
		t.Fatalf("ack %v", err)
	}
}

func TestLogLogsAndAcks(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	// As the runtime builds it: named for the dispatcher and the handler.
	deps := handler.Deps{Logger: zap.New(core).With(zap.String("dispatcher", "cart-projection"), zap.String("handler", "log"))}
	h := build(t, "log", map[string]any{"body": true, "max-body": 5}, deps)
	acks := newAcks(t)
	m := testMessage(7)
	m.Value = []byte("0123456789")
	h.Handle(context.Background(), m, acks.ack(7))
	if err := acks.wait(t, 7); err != nil {
		t.Fatalf("ack %v", err)
	}
	entries := logs.All()
	if len(entries) != 1 {
		t.Fatalf("%d entries, want 1", len(entries))
	}
	got := entries[0].ContextMap()
	want := map[string]any{
		"dispatcher": "cart-projection", "topic": "wow.example.cart.event",
		"partition": int32(3), "offset": int64(7), "key": "cart-1",
		"value_size": int64(10), "value": "01234",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("field %s = %#v, want %#v", k, got[k], v)
		}
	}
	seen := map[string]int{}
	for _, f := range entries[0].Context {
		if seen[f.Key]++; seen[f.Key] == 2 {
			t.Errorf("field %s written twice", f.Key)
		}
	}
}

func TestLogDefaultsOmitBody(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	h := build(t, "log", nil, handler.Deps{Logger: zap.New(core)})
	acks := newAcks(t)
	h.Handle(context.Background(), testMessage(1), acks.ack(1))
	if err := acks.wait(t, 1); err != nil {
		t.Fatal(err)
	}
	if _, ok := logs.All()[0].ContextMap()["value"]; ok {
		t.Fatal("value logged without body: true")
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  map[string]any
		want []string
	}{
		{"log max-body", map[string]any{"max-body": 0}, []string{"max-body"}},
		{"http missing url", map[string]any{}, []string{"url: required"}},
		{"http bad", map[string]any{
			"url":             "ftp://user:hunter2@example.com/x",
			"max-attempts":    -1,
			"max-concurrency": -1,
			"backoff-initial": "2s",
			"backoff-max":     "1s",
			"request-timeout": "0s",
			"headers":         map[string]any{"ce-id": "x", "bad header": "y", "x-ok": "z\n"},
		}, []string{"url: scheme \"ftp\"", "max-attempts", "max-concurrency", "backoff-max", "request-timeout",
			"headers.ce-id: the ce-", "headers.bad header: not a valid header name", "headers.x-ok: value"}},
		{"http no host", map[string]any{"url": "http:///x"}, []string{"url: no host"}},
		// HTTP/2 refuses a request with them before sending it: every
		// message was retried as if the endpoint did not answer.
		{"http hop-by-hop headers", map[string]any{"url": "http://x", "headers": map[string]any{"Upgrade": "websocket", "Connection": "Upgrade"}},
			[]string{"headers.Upgrade: a connection's own header", "headers.Connection: a connection's own header"}},
		{"http empty header", map[string]any{"url": "http://x", "headers": map[string]any{"X-Empty": "  "}},
			[]string{"headers.X-Empty: value is empty"}}, // HTTP.md: an empty value stops wowd at start
		{"http limits", map[string]any{"url": "http://x", "rate-limit": -1, "rate-burst": 0},
			[]string{"rate-limit: must be 0", "rate-burst: must be between 1"}},
		{"http tiny rate", map[string]any{"url": "http://x", "rate-limit": 0.0001}, []string{"rate-limit: "}},
		{"http header sources", map[string]any{
			"url":               "http://x",
			"headers":           map[string]any{"Authorization": "Bearer hunter2"},
			"headers-from-env":  map[string]any{"authorization": "TOKEN", "X-A": "", "ce-source": "S", "X-B": "A=B"},
			"headers-from-file": map[string]any{"AUTHORIZATION": "/t", "X-C": "", "bad name": "/p", "x-a": "/a"},
		}, []string{
			"headers-from-env.authorization: header also set by headers.Authorization",
			"headers-from-env.X-A: want the name of an environment variable",
			"headers-from-env.X-B: want the name of an environment variable",
			"headers-from-env.ce-source: the ce-, kafka-, wow- and wowd- prefixes are reserved",
			"headers-from-file.AUTHORIZATION: header also set by headers.Authorization",
			"headers-from-file.X-C: want a file path",
			"headers-from-file.bad name: not a valid header name",
		}},
		{"http tls", map[string]any{"url": "http://x", "tls": map[string]any{"cert-file": "/c"}},
			[]string{"tls.key-file: required with tls.cert-file", "tls: set, but url is http"}},
		{"http tls key", map[string]any{"url": "https://x", "tls": map[string]any{"key-file": "/k"}},
			[]string{"tls.cert-file: required with tls.key-file"}},
		{"http h2c https", map[string]any{"url": "https://x", "h2c": true}, []string{"h2c: set, but url is https"}},
		{"http tls unknown", map[string]any{"url": "https://x", "tls": map[string]any{"ca": "/k"}}, []string{"ca"}},
		{"http unparsable", map[string]any{"url": "http://user:hunter2@exa mple.com/"}, []string{"url: "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, _ := handler.Default().Lookup(strings.Fields(tc.name)[0])
			_, err := handlerconfig.Decode(spec, tc.raw)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %q shows the password", err)
			}
		})
	}
}

func TestHTTPConfigFields(t *testing.T) {
	spec, _ := handler.Default().Lookup("http")
	byName := map[string]handlerconfig.Field{}
	for _, f := range handlerconfig.Fields(spec) {
		byName[f.Name] = f
	}
	for name, def := range map[string]string{
		"url": "", "request-timeout": "10s", "max-attempts": "5", "backoff-initial": "200ms",
		"backoff-max": "30s", "max-concurrency": "", "headers": "", "content-type": "application/json", "h2c": "",
		"rate-limit": "", "rate-burst": "1", "headers-from-env": "", "headers-from-file": "",
		"tls.ca-file": "", "tls.cert-file": "", "tls.key-file": "", "tls.insecure-skip-verify": "",
		"batch.max-messages": "", "batch.max-bytes": "1048576", "batch.linger": "5ms",
	} {
		f, ok := byName[name]
		if !ok {
			t.Errorf("no field %s", name)
			continue
		}
		if f.Default != def || f.Description == "" {
			t.Errorf("field %s: %+v, want default %q and a description", name, f, def)
		}
	}
	if !byName["url"].Required || !byName["headers"].Secret {
		t.Errorf("url must be required and headers secret: %+v", byName)
	}
}

// build decodes raw with the default registry's spec of name and builds the
// handler, closing it at the end of the test.
func build(t *testing.T, name string, raw map[string]any, deps handler.Deps) handler.Handler {
	t.Helper()
	spec, ok := handler.Default().Lookup(name)
	if !ok {
		t.Fatalf("no handler %q", name)
	}
	cfg, err := handlerconfig.Decode(spec, raw)
	if err != nil {
		t.Fatal(err)
	}
	h, err := spec.New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := h.(handler.Closer); ok {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := c.Close(ctx); err != nil {
				t.Errorf("close: %v", err)
			}
		})
	}
	return h
}

func testMessage(offset int64) *handler.Message {
	return &handler.Message{
		Dispatcher:  "cart-projection",
		Service:     "cart-service",
		Context:     "example",
		Aggregate:   "cart",
		Kind:        handler.KindEvent,
		AggregateID: "cart-1",
		Topic:       "wow.example.cart.event",
		Partition:   3,
		Offset:      offset,
		Key:         []byte("cart-1"),
		Value:       []byte(`{"id":"e1"}`),
	}
}

// acks records the outcome of messages by offset and fails the test when a
// message is acknowledged twice.
type acks struct {
	t     *testing.T
	mu    sync.Mutex // guards got and count
	got   map[int64]chan error
	count map[int64]int
}

func newAcks(t *testing.T) *acks {
	return &acks{t: t, got: map[int64]chan error{}, count: map[int64]int{}}
}

func (a *acks) ch(off int64) chan error {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.got[off]
	if !ok {
		c = make(chan error, 1)
		a.got[off] = c
	}
	return c
}

func (a *acks) ack(off int64) handler.Ack {
	c := a.ch(off)
	return handler.AckFunc(func(err error) {
		a.mu.Lock()
		a.count[off]++
		n := a.count[off]
		a.mu.Unlock()
		if n > 1 {
			a.t.Errorf("message %d acknowledged %d times (last: %v)", off, n, err)
			return
		}
		c <- err
	})
}

// wait returns the outcome of message off, failing after 10s.
func (a *acks) wait(t *testing.T, off int64) error {
	t.Helper()
	select {
	case err := <-a.ch(off):
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("message %d not acknowledged", off)
		return nil
	}
}
