package handlers

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/wowd/wowd/handler"
)

// waitLog is a handler.WaitObserver recording, by offset, what the sink
// reported: "w" for Waiting, "s" for Started.
type waitLog struct {
	mu  sync.Mutex
	got map[int64][]string
}

func (l *waitLog) Retrying(*handler.Message, int, error, time.Duration) {}

func (l *waitLog) Waiting(ctx context.Context, m *handler.Message) { l.add(ctx, m, "w") }

func (l *waitLog) Started(ctx context.Context, m *handler.Message) { l.add(ctx, m, "s") }

// tryKey marks the context Handle is given: the reports must name the try
// by it (or a context derived from it), as wowd's receivers find it.
type tryKey struct{}

func (l *waitLog) add(ctx context.Context, m *handler.Message, what string) {
	if ctx.Value(tryKey{}) != m.Offset {
		what += "(another context)"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got[m.Offset] = append(l.got[m.Offset], what)
}

// The http sink tells a handler.WaitObserver (wowd's receivers) of each
// attempt that waits for its rate limit or for max-concurrency, and that
// it starts, before its request: wowd's try deadline does not count the
// wait, so a message queued behind a low rate-limit is not timed out, and
// parked or dead-lettered, without a request sent. An attempt that does
// not wait reports nothing; every Waiting comes before its Started. With
// batch on, each member of a batch whose request waits is reported so.
func TestHTTPTellsTheObserverOfWaitsForItsLimits(t *testing.T) {
	batchOf := func(n int) map[string]any { return map[string]any{"max-messages": n, "linger": "20ms"} }
	for name, tc := range map[string]struct {
		over      map[string]any
		delay     time.Duration // the endpoint's answer
		minWaited int           // attempts that must have waited
	}{
		"rate-limit":      {map[string]any{"rate-limit": 5.0, "rate-burst": 1}, 0, 3},
		"max-concurrency": {map[string]any{"max-concurrency": 1}, 50 * time.Millisecond, 3},
		// One message per batch: each request carries one.
		"batch/rate-limit":      {map[string]any{"rate-limit": 5.0, "rate-burst": 1, "batch": batchOf(1)}, 0, 3},
		"batch/max-concurrency": {map[string]any{"max-concurrency": 1, "batch": batchOf(1)}, 50 * time.Millisecond, 3},
		// Two batches of two: the second waits.
		"batch of 2/rate-limit":      {map[string]any{"rate-limit": 5.0, "rate-burst": 1, "batch": batchOf(2)}, 0, 2},
		"batch of 2/max-concurrency": {map[string]any{"max-concurrency": 1, "batch": batchOf(2)}, 50 * time.Millisecond, 2},
	} {
		t.Run(name, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) { time.Sleep(tc.delay) })
			log := &waitLog{got: map[int64][]string{}}
			h := build(t, "http", sinkConfig(srv.URL, tc.over), handler.Deps{Observer: log, Timeout: time.Minute})
			acks := newAcks(t)
			const n = 4
			for off := range int64(n) {
				m := testMessage(off)
				m.AggregateID = string(rune('a' + off))
				h.Handle(context.WithValue(context.Background(), tryKey{}, off), m, acks.ack(off))
			}
			for off := range int64(n) {
				if err := acks.wait(t, off); err != nil {
					t.Fatalf("offset %d: %v", off, err)
				}
			}
			log.mu.Lock()
			defer log.mu.Unlock()
			waited := 0
			for off := range int64(n) {
				switch got := log.got[off]; {
				case len(got) == 0:
				case slices.Equal(got, []string{"w", "s"}):
					waited++
				default:
					t.Errorf("offset %d: reported %v, want nothing or Waiting then Started", off, got)
				}
			}
			if waited < tc.minWaited {
				t.Errorf("%d of %d attempts reported waiting, want at least %d (the first request goes at once): %v", waited, n, tc.minWaited, log.got)
			}
		})
	}
}
