package handlers

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/wowd/wowd/handler"
)

// ackedObserver is a handler.WaitObserver that reads the message it is
// told of, as wowd's daemon observer does (o.byContext[m.Context]), and
// records reports that came after the message's outcome.
type ackedObserver struct {
	mu    sync.Mutex
	acked map[*handler.Message]bool
	late  []string
	gate  chan struct{} // Waiting of offset 2 waits for it
	in2   chan struct{} // closed when Waiting of offset 2 is in
	once  sync.Once
}

func (o *ackedObserver) Retrying(*handler.Message, int, error, time.Duration) {}

func (o *ackedObserver) report(m *handler.Message, what string) {
	_ = m.Context // the daemon's observer: o.byContext[m.Context]
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.acked[m] {
		o.late = append(o.late, what)
	}
}

func (o *ackedObserver) Waiting(_ context.Context, m *handler.Message) {
	if m.Offset == 2 {
		o.once.Do(func() { close(o.in2) })
		<-o.gate
	}
	o.report(m, "Waiting")
}

func (o *ackedObserver) Started(_ context.Context, m *handler.Message) { o.report(m, "Started") }

// The first version of 86b8a16 reported a batch's members to the
// WaitObserver from the goroutine that placed the carrier, outside
// sink.mu and after the members became visible to abandon: a member whose
// context was canceled meanwhile (its partition revoked) was acknowledged
// at once, and wowd freed and reused its job, whose Message the report
// then read. handler.WaitObserver: "a handler calls Started only after its
// Waiting returned, and before the attempt's outcome"; handler.go: a
// handler "must not keep [the message] after [it] acknowledged it". A
// member's reports are made under sink.mu now, where abandon acknowledges
// it: a cancellation waits for them. (A review of the first version wrote
// this test.)
func TestABatchMemberIsNotReportedWaitingAfterItsAck(t *testing.T) {
	release := make(chan struct{})
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) { hang(r, release) })
	defer close(release)
	obs := &ackedObserver{acked: map[*handler.Message]bool{}, gate: make(chan struct{}), in2: make(chan struct{})}
	h := build(t, "http", sinkConfig(srv.URL, map[string]any{
		"max-concurrency": 1,
		"batch":           map[string]any{"max-messages": 2, "linger": "10s"},
	}), handler.Deps{Observer: obs, Timeout: time.Minute})
	acks := newAcks(t)
	msgs := make([]*handler.Message, 4)
	for i := range msgs {
		msgs[i] = testMessage(int64(i))
		msgs[i].AggregateID = string(rune('a' + i))
	}
	// A batch of 0 and 1 takes the one request max-concurrency allows.
	h.Handle(context.Background(), msgs[0], acks.ack(0))
	h.Handle(context.Background(), msgs[1], acks.ack(1))
	// A batch of 2 and 3 queues behind it, its members reported waiting.
	ctx3, cancel3 := context.WithCancel(context.Background())
	h.Handle(context.Background(), msgs[2], acks.ack(2))
	acked3 := make(chan error, 1)
	go h.Handle(ctx3, msgs[3], handler.AckFunc(func(err error) {
		obs.mu.Lock()
		obs.acked[msgs[3]] = true // wowd frees the job now: its Message may become another record's
		obs.mu.Unlock()
		acked3 <- err
	}))
	<-obs.in2 // reporting offset 2; offset 3 is next
	cancel3() // offset 3's partition goes: abandon acknowledges it
	time.Sleep(50 * time.Millisecond)
	close(obs.gate)
	if err := <-acked3; err == nil {
		t.Fatal("offset 3 handled")
	}
	time.Sleep(100 * time.Millisecond) // the reports left come
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.late) > 0 {
		t.Errorf("offset 3 reported %v to the WaitObserver after it was acknowledged (its job may carry another record by then)", obs.late)
	}
}
