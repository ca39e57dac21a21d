package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/admin"
	"github.com/wowd/wowd/internal/config"
	"github.com/wowd/wowd/internal/handlers"
	"github.com/wowd/wowd/internal/testwait"
)

// slowSink is an HTTP sink that answers at once, except for one aggregate,
// whose requests it holds until released, and another (failing), whose
// requests it refuses for good (400) until it is told to take them.
type slowSink struct {
	*httptest.Server
	hot     string
	mu      sync.Mutex
	release chan struct{}
	done    int
	failing string         // guarded by mu
	got     map[string]int // handled per aggregate; guarded by mu
}

func newSlowSink(t *testing.T, hot string) *slowSink {
	s := &slowSink{hot: hot, release: make(chan struct{}), got: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("ce-subject")
		if id == s.hot {
			select {
			case <-s.release:
			case <-r.Context().Done():
				return
			}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if id != "" && id == s.failing {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		s.done++
		s.got[id]++
	}))
	t.Cleanup(func() {
		s.letGo()
		s.Close()
	})
	return s
}

func (s *slowSink) letGo() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.release:
	default:
		close(s.release)
	}
}

// fail makes the sink refuse the messages of id for good ("" stops it).
func (s *slowSink) fail(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failing = id
}

// handledOf returns how many messages of id the sink took.
func (s *slowSink) handledOf(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got[id]
}

func (s *slowSink) handled() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done
}

// startWithAdmin runs a daemon with the admin listener on a free loopback
// port, its one dispatcher sending the Wow events of wow.example.cart.event
// to sinkURL, parking an aggregate whose message fails for good.
func startWithAdmin(t *testing.T, c *kfake.Cluster, sinkURL string) *Daemon {
	t.Helper()
	var reg handler.Registry
	handlers.Register(&reg)
	cfg, err := config.Parse(fmt.Appendf(nil, `
wow:
  service: carts
  kafka:
    bootstrap-servers: [%s]
    commit-interval: 100ms
    heartbeat-interval: 200ms
  contexts:
    example-service:
      alias: example
      aggregates: [cart]
  dispatchers:
    projection:
      topics: [event]
      on-failure: park
      handler:
        type: http
        url: %s
  metrics:
    listen: ""
  admin:
    listen: 127.0.0.1:0
`, c.ListenAddrs()[0], sinkURL), "test.yaml", &reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := New(cfg, &reg, zaptest.NewLogger(t), "test-version")
	if err != nil {
		t.Fatal(err)
	}
	rt.Start(context.Background())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := rt.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	return rt
}

// cartTopic is the topic startWithAdmin's dispatcher reads.
const cartTopic = "wow.example.cart.event"

// produceCarts writes n Wow events for the aggregate hot, and one for each
// of others other carts.
func produceCarts(t *testing.T, c *kfake.Cluster, hot string, n, others int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: cartTopic, Key: []byte(hot), Value: event(hot+"-"+strconv.Itoa(i), hot, "")})
	}
	for i := range others {
		id := "cart-" + strconv.Itoa(i)
		recs = append(recs, &kgo.Record{Topic: cartTopic, Key: []byte(id), Value: event(id+"-"+hot, id, "")})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func getStatus(t *testing.T, addr string) admin.Status {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/admin/v1/status?top=5")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status: %s", resp.Status)
	}
	var st admin.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestAdminStatusNamesTheHeldAggregate: against a running daemon, the
// status lists the receiver's partitions and names the aggregate a slow
// sink holds as the hottest and the oldest; once the sink lets go, it is
// neither and the partitions have caught up.
func TestAdminStatusNamesTheHeldAggregate(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, cartTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close) // after the daemon stopped
	sink := newSlowSink(t, "hot-cart")
	rt := startWithAdmin(t, c, sink.URL)
	produceCarts(t, c, "hot-cart", 30, 40)

	var st admin.Status
	testwait.For(t, 30*time.Second, "the held aggregate named hot, the others handled", func() bool {
		st = getStatus(t, rt.AdminAddr())
		if len(st.Hot) == 0 || st.Hot[0].ID != "hot-cart" || st.Hot[0].Unfinished != 30 || sink.handled() != 40 || len(st.Oldest) == 0 {
			return false
		}
		// The sink answered the others; the last of them may still be
		// finishing in the receiver.
		return st.Receivers[0].InFlight == 30
	})
	if st.Version != "test-version" || st.Service != "carts" || st.Executor.Workers == 0 || len(st.Receivers) != 1 {
		t.Fatalf("status %+v", st)
	}
	r := st.Receivers[0]
	if r.Dispatcher != "projection" || r.Context != "example-service" || r.GroupID != "carts.projection.example" || !r.Joined || r.MemberID == "" || len(r.Partitions) != 3 {
		t.Fatalf("receiver %+v", r)
	}
	if len(st.Oldest) == 0 || st.Oldest[0].ID != "hot-cart" || st.Oldest[0].Aggregate != "cart" {
		t.Errorf("oldest %+v", st.Oldest)
	}
	held := r.Partitions[st.Oldest[0].Partition]
	if held.InFlight != 30 || held.Lag <= 0 || held.HighWatermark <= 0 {
		t.Errorf("the held partition %+v", held)
	}

	sink.letGo()
	testwait.For(t, 30*time.Second, "everything handled and committed", func() bool {
		st = getStatus(t, rt.AdminAddr())
		for _, p := range st.Receivers[0].Partitions {
			if p.Lag != 0 || p.InFlight != 0 {
				return false
			}
		}
		return len(st.Hot) == 0 && len(st.Oldest) == 0
	})
	if got := st.Receivers[0].Rates["handled"]; got <= 0 {
		t.Errorf("handled rate %v after 70 messages", got)
	}
}
