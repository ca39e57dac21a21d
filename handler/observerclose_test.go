package handler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/wowd/wowd/handler"
)

// holdingAck keeps the Ack of each attempt for the test to report.
type holdingAck chan handler.Ack

func (h holdingAck) Handle(_ context.Context, _ *handler.Message, ack handler.Ack) { h <- ack }

// TestObserverIsNotToldOfARetryAfterClose: Observer.Retrying promises
// that "the handler will try again after wait". An attempt in progress
// when WithRetry's handler is closed, then failing transiently, is not
// tried again (it is acknowledged with ErrClosed), yet the Observer is
// told of a retry: wowd counts wowd's retried metric, logs "retrying" and
// restarts the try's deadline for a retry that never comes. Found by
// review (stop 43 had noted it as a residual).
func TestObserverIsNotToldOfARetryAfterClose(t *testing.T) {
	inner := make(holdingAck, 1)
	obs := &observed{}
	h := handler.WithRetry(inner, handler.RetryPolicy{Initial: time.Hour, Observer: obs})
	ack, ch := outcome(t)
	h.Handle(context.Background(), msg, ack)
	attempt := <-inner
	if err := h.(handler.Closer).Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	attempt.Done(errors.New("down")) // transient, after Close
	err := await(t, ch)
	if !errors.Is(err, handler.ErrClosed) {
		t.Fatalf("outcome %v, want ErrClosed", err)
	}
	if n := obs.count(); n != 0 {
		t.Errorf("Observer told of %d retries (attempts %v), but the message was acknowledged with %v and never retried", n, obs.attempts, err)
	}
}
