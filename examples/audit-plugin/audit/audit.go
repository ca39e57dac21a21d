// Package audit is an example of a wowd plugin built out of tree: the audit
// handler appends one JSON line per message to a file, a trail of what wowd
// delivered. Importing the package registers it; cmd/wowd-audit is a wowd
// with it compiled in:
//
//	import _ "example.com/wowd-audit/audit"
//
// and a dispatcher selects it:
//
//	handler:
//	  type: audit
//	  path: /var/log/wowd/cart-audit.jsonl
//	  fsync: true
//
// Delivery is at least once: after a crash or a rebalance a message may be
// appended again. Its topic, partition and offset identify it.
package audit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wowd/wowd/handler"
)

// Config configures the audit handler.
type Config struct {
	Path        string `config:"path" required:"true" desc:"File that gets one JSON line per message; created with mode 0600 if missing, appended to otherwise."`
	Fsync       bool   `config:"fsync" desc:"Flush each line to stable storage before acknowledging its message (slower; survives a power loss)."`
	MaxAttempts int    `config:"max-attempts" desc:"Attempts to write a line before the message is reported as failed; 0 retries forever."`
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	var errs []error
	if c.Path == "" {
		errs = append(errs, errors.New("path: must not be empty"))
	}
	if c.MaxAttempts < 0 {
		errs = append(errs, errors.New("max-attempts: must not be negative (0 retries forever)"))
	}
	return errors.Join(errs...)
}

func init() { handler.Register(Spec()) }

// Spec returns the specification of the audit handler.
func Spec() handler.Spec {
	return handler.Spec{
		Name:    "audit",
		Summary: "Appends one JSON line per message to a file (an audit trail).",
		Config:  func() any { return &Config{MaxAttempts: 5} },
		New: func(cfg any, deps handler.Deps) (handler.Handler, error) {
			c, ok := cfg.(*Config)
			if !ok {
				return nil, fmt.Errorf("audit: config is %T, want *Config", cfg)
			}
			if err := c.Validate(); err != nil {
				return nil, err
			}
			f, err := os.OpenFile(c.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
			if err != nil {
				return nil, fmt.Errorf("path: %w", err)
			}
			h := &Handler{out: &file{f: f, path: c.Path, fsync: c.Fsync}, now: time.Now}
			return handler.WithRetry(h, handler.RetryPolicy{MaxAttempts: c.MaxAttempts, Observer: deps.Observer}), nil
		},
	}
}

// Line is one line of the audit file: where a message came from, what it
// is, and a digest of its value.
type Line struct {
	Written     time.Time `json:"written"` // when the line was written
	Service     string    `json:"service"`
	Dispatcher  string    `json:"dispatcher"`
	Context     string    `json:"context"`
	Aggregate   string    `json:"aggregate"`
	Kind        string    `json:"kind"` // command, event or state
	AggregateID string    `json:"aggregate_id"`
	Topic       string    `json:"topic"`
	Partition   int32     `json:"partition"`
	Offset      int64     `json:"offset"`
	RecordTime  time.Time `json:"record_time,omitzero"` // the record timestamp
	Size        int       `json:"size"`                 // bytes of the value
	SHA256      string    `json:"sha256"`               // of the value, in hex
}

// Handler is the audit handler. Writing a line blocks, so it is a
// [handler.Blocker]: wowd calls it on its pool for blocking work. Spec wraps
// it with [handler.WithRetry], which retries failed writes.
type Handler struct {
	out    appender
	now    func() time.Time
	closed atomic.Bool // set by Close
}

var (
	_ handler.Handler = (*Handler)(nil)
	_ handler.Blocker = (*Handler)(nil)
	_ handler.Closer  = (*Handler)(nil)
)

// appender is where lines go: the file, or a stand-in in tests.
type appender interface {
	// Append writes the line of m; ctx is the message's.
	Append(ctx context.Context, m *handler.Message, line []byte) error
	Close() error
}

// Blocking reports that Handle blocks (it writes to a file).
func (h *Handler) Blocking() bool { return true }

// Handle appends the line of m and acknowledges it once written.
func (h *Handler) Handle(ctx context.Context, m *handler.Message, ack handler.Ack) {
	if err := ctx.Err(); err != nil {
		ack.Done(err)
		return
	}
	if h.closed.Load() {
		ack.Done(handler.ErrClosed)
		return
	}
	line, err := json.Marshal(h.line(m))
	if err != nil {
		ack.Done(handler.Classed(handler.Permanent, fmt.Errorf("encoding the audit line: %w", err)))
		return
	}
	ack.Done(h.out.Append(ctx, m, append(line, '\n')))
}

// line describes m.
func (h *Handler) line(m *handler.Message) Line {
	sum := sha256.Sum256(m.Value)
	return Line{
		Written:     h.now().UTC(),
		Service:     m.Service,
		Dispatcher:  m.Dispatcher,
		Context:     m.Context,
		Aggregate:   m.Aggregate,
		Kind:        m.Kind.String(),
		AggregateID: m.AggregateID,
		Topic:       m.Topic,
		Partition:   m.Partition,
		Offset:      m.Offset,
		RecordTime:  m.Timestamp.UTC(),
		Size:        len(m.Value),
		SHA256:      hex.EncodeToString(sum[:]),
	}
}

// Close closes the file, after the write in progress if any. Later messages
// are acknowledged with handler.ErrClosed.
func (h *Handler) Close(context.Context) error {
	if h.closed.Swap(true) {
		return nil
	}
	return h.out.Close()
}

// file appends lines to an open file.
type file struct {
	path  string
	fsync bool

	mu sync.Mutex // guards f and the writes to it
	f  *os.File   // nil once closed
}

// Append writes line, then syncs the file if asked to.
func (a *file) Append(_ context.Context, _ *handler.Message, line []byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return handler.ErrClosed
	}
	if _, err := a.f.Write(line); err != nil {
		return fmt.Errorf("writing %s: %w", a.path, err)
	}
	if a.fsync {
		if err := a.f.Sync(); err != nil {
			return fmt.Errorf("syncing %s: %w", a.path, err)
		}
	}
	return nil
}

// Close closes the file.
func (a *file) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return nil
	}
	err := a.f.Close()
	a.f = nil
	if err != nil {
		return fmt.Errorf("closing %s: %w", a.path, err)
	}
	return nil
}
