package receiver

// Defects a review of the receiver's per-record path (jobs, tokens, tries,
// the watermark, admission, commits) found, each with its test.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/testwait"
)

// byHand stops r's own loops, so that the test drives polls and
// rebalances by hand, and runs the deadline watcher again.
func byHand(t *testing.T, r *Receiver) {
	t.Helper()
	stop(t, r)
	r.stopping.Store(false)
	r.closing.Store(false)
	r.watchStop, r.watchDone = make(chan struct{}), make(chan struct{})
	go r.watchDeadlines()
	t.Cleanup(func() { close(r.watchStop); <-r.watchDone })
}

// A try's context ends once the handler acknowledged it, and so before its
// partition goes. It was left open: a handler that acknowledged and left
// work bound to its context (a goroutine waiting for Done,
// context.AfterFunc) was never told, even once the partition was lost,
// since closePartition ends only the tries of the jobs still in its
// tracker; Err alone saw the partition's end. Found by review.
func TestATryContextEndsWithItsAck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		quit := make(chan struct{})
		defer close(quit)
		var ctxs sync.Map // offset -> the try's context
		ended := make(chan int64, 4)
		afterFunc := make(chan int64, 4)
		hd := handlerFunc(func(ctx context.Context, m *handler.Message, ack handler.Ack) {
			ctxs.Store(m.Offset, ctx)
			ack.Done(nil)
			o := m.Offset
			context.AfterFunc(ctx, func() { afterFunc <- o })
			go func() { // background work bound to the try
				select {
				case <-ctx.Done():
					ended <- o
				case <-quit:
				}
			}()
		})
		r := h.receiver("g-review-try-ctx", hd, 16)
		byHand(t, r)
		assigned := map[string][]int32{testTopic: {0}}
		r.onAssigned(context.Background(), r.cl, assigned)
		r.admitPartition(handFetch(func(int64) string { return "A" }, 0, 1))
		testwait.For(t, 5*time.Second, "the record handled", func() bool { return r.InFlight() == 0 })
		r.onLost(context.Background(), r.cl, assigned) // the partition moves on
		time.Sleep(time.Second)
		select {
		case <-ended:
		default:
			t.Error("the try was acknowledged and its partition lost a second ago, and its Done is still open")
		}
		select {
		case <-afterFunc:
		default:
			t.Error("a context.AfterFunc of the try did not run when its partition was lost")
		}
		v, _ := ctxs.Load(int64(0))
		ctx := v.(context.Context)
		if err := ctx.Err(); !errors.Is(err, context.Canceled) {
			t.Errorf("the try's Err is %v, want context.Canceled", err)
		}
		// Err ended it just now (lazily): nothing is left blocked in the bubble.
	})
}

// A dead-letter write waiting for room in the client's buffer holds
// neither the poll loop nor Stop. It is made on the goroutine that
// concludes a record (the poll loop for an unroutable record, a worker,
// the handler's goroutine, the deadline watcher), and kgo's Produce waited
// while the buffer was full (MaxBufferedRecords, 10,000 by default: fewer
// than a window of max-in-flight 65,536 can hold of dead letters waiting
// for a broker that does not answer): the poll loop never returned, and
// Stop overran its deadline for as long as the broker stayed silent. Here
// the buffer is made small instead of the window large. Found by review.
func TestADeadLetterWaitingForBufferRoomHoldsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		cl, err := kgo.NewClient(brokers(h.c)...)
		if err != nil {
			t.Fatal(err)
		}
		for range 4 { // keyless: unroutable, dead-lettered from the poll loop
			if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: testTopic, Value: []byte("x")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		cl.Close()
		hang := unanswered(h.c, kmsg.Produce) // the receiver's only writes are its dead letters
		hang.on.Store(true)
		r := h.receiver("g-review-dl-buffer", acking, 16, func(o *Options) {
			o.ClientOpts = append(o.ClientOpts, kgo.MaxBufferedRecords(2))
		})
		testwait.For(t, 10*time.Second, "a dead-letter write hung", func() bool { return hang.hung.Load() > 0 })
		time.Sleep(time.Second)
		stopped := make(chan struct{})
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			_ = r.Stop(ctx)
			close(stopped)
		}()
		select {
		case <-stopped:
		case <-time.After(30 * time.Second):
			t.Error("Stop with a 500ms deadline still runs after 30s: its poll loop waits in a dead-letter Produce for buffer room")
		}
		hang.on.Store(false) // the client's retry is answered: everything ends
		<-stopped
	})
}
