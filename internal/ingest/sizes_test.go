package ingest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wowd/wowd/internal/receiver"
	"github.com/wowd/wowd/internal/topicsize"
)

// consumer is a receiver that consumes every topic and counts what it is
// asked to admit; it admits nothing (the request is then answered 503).
type consumer struct{ admits atomic.Int32 }

func (*consumer) Dispatcher() string                     { return "projection" }
func (*consumer) Routes(string) bool                     { return true }
func (*consumer) Published(string, string, int32, int64) {}
func (*consumer) Refused(string, string)                 {}
func (*consumer) NotPublished(string, string)            {}
func (c *consumer) Admit(context.Context, *kgo.Record) (receiver.Admitted, error) {
	c.admits.Add(1)
	return receiver.Admitted{}, errors.New("refused by the test")
}

// padded is message with a value of about n bytes (padding in its header).
func padded(n int) []byte {
	pad := max(n-len(message)-len(`"pad":""`), 0)
	return []byte(strings.Replace(message, `"header":{}`, `"header":{"pad":"`+strings.Repeat("x", pad)+`"}`, 1))
}

// TestAMessageItsTopicWouldRefuseIsNotHandled: the topic takes records of
// up to 5000 bytes. A message that would be published larger (its value
// with the mark naming the receivers in its headers) is answered 413,
// counted as too_large, and neither admitted to a receiver nor published;
// one that fits is admitted. Handled locally first, the larger one would
// have run its handlers and then been refused by Kafka.
func TestAMessageItsTopicWouldRefuseIsNotHandled(t *testing.T) {
	p := &producer{}
	in, m := newIngest(p)
	c := &consumer{}
	in.Receivers = []Receiver{c}
	var reads atomic.Int32
	in.Sizes = &Sizes{Log: zap.NewNop(), Read: func(context.Context, string) (int32, error) {
		reads.Add(1)
		return 5000, nil
	}}
	w := send(in, padded(4990))
	if w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(w.Body.String(), "over its limit of 5000 bytes (its max.message.bytes)") {
		t.Fatalf("a message of 4990 bytes for a topic of 5000: %d %s; want 413 naming the limit", w.Code, w.Body)
	}
	if n := c.admits.Load(); n != 0 || p.published() != 0 || counted(t, m, "too_large") != 1 {
		t.Fatalf("admitted %d times, published %d, too_large %v; want 0, 0, 1", n, p.published(), counted(t, m, "too_large"))
	}
	w = send(in, padded(4000))
	if w.Code != http.StatusServiceUnavailable || c.admits.Load() != 1 {
		t.Fatalf("a message of 4000 bytes: %d %s, admitted %d times; want it admitted (and refused by the test's receiver)", w.Code, w.Body, c.admits.Load())
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("the topic's limit read %d times, want once", n)
	}
	if got := in.Sizes.BatchMax("wow.example.cart.event"); got != 5000 {
		t.Errorf("the client's batch limit for the topic %d, want 5000", got)
	}
	if got := in.Sizes.BatchMax("wow.example.other.event"); got != topicsize.DefaultBatchMax {
		t.Errorf("the client's batch limit for a topic never read %d, want the default", got)
	}
}

// TestTopicSizeReadOnceOrAgain: concurrent first messages of a topic wait
// for one read; a topic that does not exist yet is read again by the next
// message; any other failure keeps the topic at the client's default,
// warned of once, and is not read again (the client keeps its first batch
// limit for a topic, so a later read could not be used).
func TestTopicSizeReadOnceOrAgain(t *testing.T) {
	var reads atomic.Int32
	release := make(chan struct{})
	s := &Sizes{Log: zap.NewNop(), Read: func(context.Context, string) (int32, error) {
		reads.Add(1)
		<-release
		return 3_000_000, nil
	}}
	var wg sync.WaitGroup
	limits := make([]int32, 8)
	for i := range limits {
		wg.Go(func() { limits[i], _, _ = s.Limit(context.Background(), "a") })
	}
	close(release)
	wg.Wait()
	if n := reads.Load(); n != 1 {
		t.Errorf("8 concurrent first messages read the limit %d times, want once", n)
	}
	if fmt.Sprint(limits) != "[3000000 3000000 3000000 3000000 3000000 3000000 3000000 3000000]" {
		t.Errorf("limits %v, want 3000000 for each", limits)
	}

	core, logs := observer.New(zapcore.WarnLevel)
	errs := []error{fmt.Errorf("b: %w", kerr.UnknownTopicOrPartition), kerr.RequestTimedOut, context.DeadlineExceeded, kerr.TopicAuthorizationFailed, fmt.Errorf("c: %w", ErrNoLimit)}
	reads.Store(0)
	s = &Sizes{Log: zap.New(core), Read: func(context.Context, string) (int32, error) {
		n := reads.Add(1)
		if int(n) <= len(errs) {
			return 0, errs[n-1]
		}
		return 3_000_000, nil
	}}
	for i, want := range []struct {
		limit int32
		read  bool
		err   string
		reads int32
	}{
		// Not there yet, or a passing failure: nothing may be admitted
		// (the caller is answered 503), and the next message reads again.
		{0, false, "topic b does not exist", 1},
		{0, false, "reading the max.message.bytes of b: REQUEST_TIMED_OUT", 2},
		{0, false, "reading the max.message.bytes of b: context deadline exceeded", 3},
		{topicsize.DefaultBatchMax, false, "", 4}, // refused: given up for good
		{topicsize.DefaultBatchMax, false, "", 4},
		{topicsize.DefaultBatchMax, false, "", 5}, // c: no limit in its configuration: given up for good
		{topicsize.DefaultBatchMax, false, "", 5},
	} {
		name := "b"
		if i >= 5 {
			name = "c"
		}
		limit, read, err := s.Limit(context.Background(), name)
		if limit != want.limit || read != want.read || reads.Load() != want.reads || (err == nil) != (want.err == "") || (err != nil && !strings.HasPrefix(err.Error(), want.err)) {
			t.Errorf("message %d: limit %d, read %v, err %v after %d reads; want %d, %v, %q after %d", i, limit, read, err, reads.Load(), want.limit, want.read, want.err, want.reads)
		}
		if i < 3 && s.BatchMax("b") != topicsize.DefaultBatchMax {
			t.Errorf("message %d: a batch limit known for b before its read succeeded", i)
		}
	}
	if n := logs.FilterMessageSnippet("reading a topic's max.message.bytes").Len(); n != 2 {
		t.Errorf("%d warnings, want 2 (for the refused read, and the topic without a limit)", n)
	}
	if got := s.BatchMax("b"); got != topicsize.DefaultBatchMax {
		t.Errorf("batch limit %d after a refused read, want the default", got)
	}
}
