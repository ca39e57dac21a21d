package handlers

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
	"github.com/wowd/wowd/internal/handlerconfig"
)

// The HTTP sink against an endpoint that answers after benchLatency, fed the
// way a receiver feeds it, and against the model it replaces: one
// goroutine per partition POSTing its records one at a time. Both run in
// the same process against the same kind of server, so their ratio is the
// signal; see docs/benchmarks.md ("HTTP sink throughput") and `make
// bench-http`.
const (
	benchLatency    = 5 * time.Millisecond
	benchPartitions = 12
	benchAggregates = 1_000 // per partition
)

// BenchmarkHTTPSink measures messages per second through POSTs to a server
// on 127.0.0.1 that answers 200 after benchLatency. One op is one message.
//
//   - sequential-per-partition: 12 goroutines, each POSTing one message at
//     a time with a keep-alive client (the per-partition consumer's model).
//   - sink/defaults: the http sink built through its configuration with
//     nothing but url set, fed by 12 partitions of 1,000 aggregates each:
//     at most one message in flight per aggregate and at most the
//     receiver's default window (wow.dispatch.max-in-flight) in flight in
//     all, each message with a context of its own, as a receiver does.
//   - sink/max-concurrency=64: the same with the sink's former default.
//   - sink/h2c: the defaults and h2c, against the server speaking HTTP/2
//     without TLS as well.
//   - ceiling/net-http: no sink machinery: as many goroutines as
//     sink/defaults may have requests in flight, each building the sink's
//     request for a message and sending it with the sink's client, one at
//     a time. What net/http itself allows on this machine.
//   - ceiling/no-http: the feeder alone, with a handler that acknowledges
//     each message benchLatency later from a timer: what the method
//     itself allows (timer lateness, the feeding).
//
// littles-ratio is the speed over its bound, min(window, max-concurrency,
// aggregates) / benchLatency (for the sequential model, partitions /
// benchLatency); cpu-us/msg is the process's CPU time (server included)
// per message; conns is the connections the server accepted during the
// measured run (reused connections: none).
func BenchmarkHTTPSink(b *testing.B) {
	window := config.Default().Dispatch.MaxInFlight
	b.Run("impl=sequential-per-partition", func(b *testing.B) {
		srv := newBenchServer(false)
		defer srv.Close()
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = benchPartitions // one kept-alive connection per partition
		client := &http.Client{Transport: tr}
		defer tr.CloseIdleConnections()
		msgs := benchMessages()
		post := func(m *handler.Message) {
			req, err := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(m.Value))
			if err != nil {
				b.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
		measure(b, srv, benchPartitions, func(n int) {
			var wg sync.WaitGroup
			for p := range benchPartitions {
				wg.Go(func() {
					for i := p; i < n; i += benchPartitions {
						m := msgs[p][(i/benchPartitions)%benchAggregates]
						m.Offset = int64(i / benchPartitions)
						post(m)
					}
				})
			}
			wg.Wait()
		})
	})
	sink := func(name string, over map[string]any, h2c bool) {
		b.Run("impl=sink/"+name, func(b *testing.B) {
			srv := newBenchServer(h2c)
			defer srv.Close()
			s, bound := newBenchSink(b, srv.URL, over, window)
			f := newFeeder(s, window)
			measure(b, srv, bound, func(n int) {
				if err := f.run(n); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
	sink("defaults", nil, false)
	sink("max-concurrency=64", map[string]any{"max-concurrency": 64}, false)
	sink("h2c", map[string]any{"h2c": true}, true)
	b.Run("impl=ceiling/net-http", func(b *testing.B) {
		srv := newBenchServer(false)
		defer srv.Close()
		s, bound := newBenchSink(b, srv.URL, nil, window)
		msgs := benchMessages()
		measure(b, srv, bound, func(n int) {
			var wg sync.WaitGroup
			for g := range bound {
				wg.Go(func() {
					for i := g; i < n; i += bound {
						p, a := i%benchPartitions, (i/benchPartitions)%benchAggregates
						m := *msgs[p][a]
						m.Offset = int64(i / benchPartitions)
						req, err := s.newRequest(context.Background(), &m, 1, s.live.Load())
						if err != nil {
							b.Error(err)
							return
						}
						resp, err := s.client.Do(req)
						if err != nil {
							b.Error(err)
							return
						}
						drainClose(resp.Body)
					}
				})
			}
			wg.Wait()
		})
	})
	b.Run("impl=ceiling/no-http", func(b *testing.B) {
		f := newFeeder(timerHandler{}, window)
		measure(b, nil, window, func(n int) {
			if err := f.run(n); err != nil {
				b.Fatal(err)
			}
		})
	})
}

// timerHandler acknowledges each message benchLatency after Handle.
type timerHandler struct{}

func (timerHandler) Handle(_ context.Context, _ *handler.Message, ack handler.Ack) {
	time.AfterFunc(benchLatency, func() { ack.Done(nil) })
}

// newBenchSink builds the http sink through its configuration, url set to
// url and over on top of the defaults, closed at the end of the benchmark.
// It returns the sink and the bound of its concurrency when a receiver's
// window holds at most window messages.
func newBenchSink(b *testing.B, url string, over map[string]any, window int) (*httpSink, int) {
	raw := map[string]any{"url": url}
	for k, v := range over {
		raw[k] = v
	}
	spec, _ := handler.Default().Lookup("http")
	cfg, err := handlerconfig.Decode(spec, raw)
	if err != nil {
		b.Fatal(err)
	}
	h, err := spec.New(cfg, handler.Deps{Timeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := h.(handler.Closer).Close(context.Background()); err != nil {
			b.Error(err)
		}
	})
	bound := min(window, benchPartitions*benchAggregates)
	if c := cfg.(*HTTPConfig).MaxConcurrency; c > 0 {
		bound = min(bound, c)
	}
	return h.(*httpSink), bound
}

// measure runs run(n) for a warm-up, then for b.N messages, and reports
// the speed, its ratio to concurrency/benchLatency, the CPU per message
// and the connections srv (if any) accepted meanwhile.
func measure(b *testing.B, srv *benchServer, concurrency int, run func(n int)) {
	run(max(2*concurrency, 100)) // connections opened, pools and stacks grown
	b.ReportAllocs()
	var conns0 int64
	if srv != nil {
		conns0 = srv.conns.Load()
	}
	cpu0 := cpuTime()
	b.ResetTimer()
	start := time.Now()
	run(b.N)
	elapsed := time.Since(start)
	b.StopTimer()
	cpu := cpuTime() - cpu0
	speed := float64(b.N) / elapsed.Seconds()
	b.ReportMetric(speed, "msgs/s")
	b.ReportMetric(speed/(float64(concurrency)/benchLatency.Seconds()), "littles-ratio")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/msg")
	if srv != nil {
		b.ReportMetric(float64(srv.conns.Load()-conns0), "conns")
	}
}

// cpuTime is the CPU time the process used so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchServer is a server on 127.0.0.1 that reads each request and answers
// 200 after benchLatency, counting the connections it accepts.
type benchServer struct {
	*httptest.Server
	conns atomic.Int64
}

// newBenchServer starts a benchServer speaking HTTP/1.1, and also HTTP/2
// without TLS when h2c is set.
func newBenchServer(h2c bool) *benchServer {
	s := &benchServer{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(benchLatency)
		w.WriteHeader(http.StatusOK)
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	if h2c {
		s.Config.Protocols = new(http.Protocols)
		s.Config.Protocols.SetHTTP1(true)
		s.Config.Protocols.SetUnencryptedHTTP2(true)
	}
	s.Start()
	return s
}

// benchMessages returns the messages of each aggregate of each partition,
// shaped as a Wow event stream: one is reused for every message of its
// aggregate, which has at most one in flight.
func benchMessages() [][]*handler.Message {
	created := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	out := make([][]*handler.Message, benchPartitions)
	for p := range out {
		out[p] = make([]*handler.Message, benchAggregates)
		for a := range out[p] {
			id := "cart-" + strconv.Itoa(p) + "-" + strconv.Itoa(a)
			msgID := fmt.Sprintf("0ZX4dZ4Q%07d", p*benchAggregates+a) // unique, as Wow ids are: a batch holds one message of an id
			out[p][a] = &handler.Message{
				Dispatcher: "cart-projection", Service: "cart-service",
				Context: "example", Aggregate: "cart", Kind: handler.KindEvent,
				AggregateID: id, Topic: "wow.example.cart.event", Partition: int32(p),
				Key:       []byte(id),
				Value:     []byte(`{"id":"` + msgID + `","contextName":"example","aggregateName":"cart","aggregateId":"` + id + `","tenantId":"(0)","requestId":"0ZX4dZ4Q0001001","commandId":"0ZX4dZ4Q0001001","version":2,"header":{"trace_id":"a1b2c3","local_first":"true"},"body":[{"name":"cart_item_added","revision":"0.0.1","bodyType":"me.ahoo.wow.example.api.cart.CartItemAdded","body":{"added":{"productId":"p-1","quantity":1}}}],"createTime":1764504000000}`),
				Timestamp: created,
				Wow: &handler.Wow{
					ID: msgID, ContextName: "example", AggregateName: "cart", AggregateID: id,
					TenantID: "(0)", RequestID: "0ZX4dZ4Q0001001", CommandID: "0ZX4dZ4Q0001001",
					Version: 2, HasVersion: true, CreateTime: created,
					Header: []handler.WowHeader{{Key: "trace_id", Value: "a1b2c3"}, {Key: "local_first", Value: "true"}},
					Events: []string{"cart_item_added"},
				},
			}
		}
	}
	return out
}

// feeder feeds a handler the way a receiver does: each partition's
// messages in order, at most one in flight per aggregate and at most
// window in flight in all, each with a context of its own (a receiver's
// try context: it ends only with its try, and reports an AfterFunc).
type feeder struct {
	h      handler.Handler
	msgs   [][]*handler.Message
	window chan struct{}   // a token per message in flight
	aggs   []chan struct{} // per aggregate: a token while it has a message in flight
	acks   []handler.Ack   // per aggregate

	left   atomic.Int64 // messages of the run not yet acknowledged
	failed atomic.Pointer[error]
	done   chan struct{} // closed by the last acknowledgement of a run
}

func newFeeder(h handler.Handler, window int) *feeder {
	f := &feeder{h: h, msgs: benchMessages(), window: make(chan struct{}, window)}
	f.aggs = make([]chan struct{}, benchPartitions*benchAggregates)
	f.acks = make([]handler.Ack, len(f.aggs))
	for i := range f.aggs {
		f.aggs[i] = make(chan struct{}, 1)
		f.acks[i] = handler.AckFunc(func(err error) {
			if err != nil {
				f.failed.CompareAndSwap(nil, &err)
			}
			<-f.aggs[i]
			<-f.window
			if f.left.Add(-1) == 0 {
				close(f.done)
			}
		})
	}
	return f
}

// run feeds n messages, spread over the partitions, and waits for their
// acknowledgements.
func (f *feeder) run(n int) error {
	f.left.Store(int64(n))
	f.done = make(chan struct{})
	var wg sync.WaitGroup
	for p := range benchPartitions {
		wg.Go(func() {
			for i := p; i < n; i += benchPartitions {
				a := (i / benchPartitions) % benchAggregates
				agg := p*benchAggregates + a
				f.aggs[agg] <- struct{}{}
				f.window <- struct{}{}
				m := f.msgs[p][a]
				m.Offset = int64(i / benchPartitions)
				f.h.Handle(&tryCtx{}, m, f.acks[agg])
			}
		})
	}
	wg.Wait()
	<-f.done
	if err := f.failed.Load(); err != nil {
		return *err
	}
	return nil
}

// tryCtx is a context of one try as a receiver makes it: not canceled
// here, with a lazily made Done channel and AfterFunc registrations kept
// in a list, without goroutines.
type tryCtx struct {
	mu    sync.Mutex // guards done and funcs
	done  chan struct{}
	funcs int
}

func (c *tryCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *tryCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return nil
}
func (c *tryCtx) Value(any) any { return nil }
func (c *tryCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
	}
	return c.done
}

// AfterFunc registers f, which never runs: the try never ends early.
func (c *tryCtx) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	c.funcs++
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.funcs--
		return true
	}
}
