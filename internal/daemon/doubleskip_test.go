package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/testwait"
)

// TestASecondSkipDoesNotDeadLetterAHeadNobodySawFail: an operator submits
// skip twice through the admin API (a double click, or the command run
// again) while the first skip's redrive runs. The first dead-letters m0
// and redrives m1, which fails: the aggregate stays parked at m1, a head
// nobody saw fail. The second request was asked on m0's head; it is
// dropped, not done on m1. It was done: m1 was dead-lettered 4 ms after it
// failed and the aggregate unparked past it, a hole in its history that
// parking exists to prevent.
func TestASecondSkipDoesNotDeadLetterAHeadNobodySawFail(t *testing.T) {
	const topic = "wow.example.cart.event"
	c := newCluster(t, kfake.SeedTopics(1, topic), kfake.AllowAutoTopicCreation())
	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	spec := handler.Spec{Name: "skiptwice", New: func(any, handler.Deps) (handler.Handler, error) {
		return handler.Sync(func(_ context.Context, m *handler.Message) error {
			switch m.Wow.ID {
			case "m0":
				return handler.Classed(handler.Permanent, errors.New("m0 rejected"))
			case "m1":
				select {
				case <-release:
				default:
					if m.Partition >= 0 { // redriven: block until the test asked again
						once.Do(func() { close(entered) })
						<-release
					}
				}
				return handler.Classed(handler.Permanent, errors.New("m1 rejected"))
			}
			return nil
		}), nil
	}}
	rt := daemonWith(t, fmt.Sprintf(`
wow:
  service: carts
  kafka:
    bootstrap-servers: [%s]
    heartbeat-interval: 200ms
  contexts:
    example-service:
      alias: example
      aggregates: [cart]
  dispatchers:
    projection:
      topics: [event]
      on-failure: park
      handler: {type: skiptwice}
  metrics:
    listen: ""
  admin:
    listen: 127.0.0.1:0
`, c.ListenAddrs()[0]), spec)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, id := range []string{"m0", "m1", "m2"} {
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Key: []byte("cart-9"), Value: event(id, "cart-9", "")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	base := "http://" + rt.AdminAddr() + "/admin/v1"
	type pa struct {
		ID     string
		Reason string
		Busy   bool
	}
	parked := func() (out []pa) {
		resp, err := http.Get(base + "/status")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st struct {
			Parked struct{ Aggregates []pa }
		}
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		return st.Parked.Aggregates
	}
	testwait.For(t, 20*time.Second, "cart-9 parked at m0", func() bool { p := parked(); return len(p) == 1 && p[0].Reason != "" })
	skip := func() int {
		code, body := adminAction(t, rt, "projection", "cart-9", "skip")
		t.Logf("skip: %d %s", code, body)
		return code
	}
	skip()
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("m1 was not redriven")
	}
	code := skip() // the second submission, while the first runs
	close(release)
	// Let the owner settle.
	time.Sleep(5 * time.Second)
	p := parked()
	t.Logf("after: %+v", p)
	// Read the dead-letter topic.
	dl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic+".dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer dl.Close()
	var got []string
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for {
		fs := dl.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		fs.EachRecord(func(r *kgo.Record) {
			var v struct{ ID string }
			_ = json.Unmarshal(r.Value, &v)
			got = append(got, v.ID)
		})
	}
	if code != http.StatusAccepted {
		t.Fatalf("the second skip answered %d", code)
	}
	if len(p) != 1 || !strings.Contains(p[0].Reason, "m1 rejected") || !slices.Equal(got, []string{"m0"}) {
		t.Errorf("after a second skip asked on m0's head: dead letters %v, parked %+v; want m0 dead-lettered and cart-9 parked at m1", got, p)
	}
}
