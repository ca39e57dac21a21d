package receiver

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/executor"
	"github.com/wowd/wowd/internal/metrics"
	"github.com/wowd/wowd/internal/wow/wowtest"
)

// BenchmarkConsume measures the whole consuming path — franz-go fetching for
// a consumer group, the receiver's window and offset tracking, the Wow
// checks (format wow), the shared executor, a no-op handler, the metrics
// and the final commit — against a plain franz-go group consumer that polls
// and iterates the same records and commits once at the end. The records
// are Wow domain event streams of about 470 bytes (snappy-compressed, as
// kgo produces by default) over 10,000 aggregates. Everything runs in one
// process with the fake broker, whose CPU they share: the figure is the
// ratio within a round (docs/benchmarks.md). Each iteration reads every
// record of the topic with a new group; ns/rec is per record read. For
// context it reports the process's CPU per record (cpu-ns/rec, the fake
// broker's included), the cores that makes (cpu over elapsed time) and the
// parked executor workers woken per record (wakes/rec), and per record the
// receiver's poll loop turns (rounds/rec: each a wake-up of it, or a poll
// that returned) and polls (polls/rec). The CPU includes the untimed checks
// after each run, so both CPU figures read a little high.
func BenchmarkConsume(b *testing.B) {
	const (
		partitions = 12
		records    = 400_000
		keys       = 10_000
	)
	c := newCluster(b, partitions, testTopic)
	versions := make([]int64, keys)
	produceValues(b, c, testTopic, records, keys, func(k int) []byte {
		versions[k]++
		return wowtest.EventStream("shop", "cart", "agg-"+strconv.Itoa(k), versions[k])
	})
	ex := executor.New(executor.Options{})
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := ex.Close(ctx); err != nil {
			b.Error(err)
		}
	}()
	impls := []struct {
		name string
		run  func(b *testing.B, group string) (rounds, polls int64)
	}{
		{"raw-franz-go", func(b *testing.B, group string) (int64, int64) { consumeRaw(b, c, group, records); return 0, 0 }},
		{"receiver/format=raw", func(b *testing.B, group string) (int64, int64) {
			return consumeReceiver(b, c, ex, group, records, false)
		}},
		{"receiver/format=wow", func(b *testing.B, group string) (int64, int64) {
			return consumeReceiver(b, c, ex, group, records, true)
		}},
	}
	for _, impl := range impls {
		b.Run("impl="+impl.name, func(b *testing.B) {
			cpu0, wakes0 := processCPU(b), ex.Stats().Wakeups
			var rounds, polls int64
			for i := range b.N {
				n, p := impl.run(b, fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i))
				rounds, polls = rounds+n, polls+p
			}
			cpu, wakes := processCPU(b)-cpu0, ex.Stats().Wakeups-wakes0
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*records), "ns/rec")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*records), "cpu-ns/rec")
			b.ReportMetric(cpu.Seconds()/b.Elapsed().Seconds(), "cores")
			b.ReportMetric(float64(wakes)/float64(b.N*records), "wakes/rec") // parked workers woken (executor.Stats)
			if rounds > 0 {
				b.ReportMetric(float64(rounds)/float64(b.N*records), "rounds/rec")
				b.ReportMetric(float64(polls)/float64(b.N*records), "polls/rec")
			}
		})
	}
}

// processCPU is the CPU time (user and system) the process has used so far,
// the fake broker's included.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchClientOpts are the fetch settings both sides use.
func benchClientOpts(c *kfake.Cluster) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.FetchMaxBytes(1 << 20),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.HeartbeatInterval(200 * time.Millisecond),
	}
}

func consumeRaw(b *testing.B, c *kfake.Cluster, group string, records int) {
	opts := append(benchClientOpts(c), kgo.ConsumerGroup(group), kgo.ConsumeTopics(testTopic), kgo.DisableAutoCommit())
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got, bytes int
	for got < records {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			b.Fatalf("raw consumer read %d of %d records: %v", got, records, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			got++
			bytes += len(r.Key) + len(r.Value)
		})
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		b.Fatal(err)
	}
	if bytes == 0 {
		b.Fatal("read no bytes")
	}
}

// consumeReceiver reads the records with a receiver of the default window
// (wow.dispatch.max-in-flight), with or without the Wow checks, and returns
// the turns its poll loop took and the polls among them.
func consumeReceiver(b *testing.B, c *kfake.Cluster, ex *executor.Executor, group string, records int, wow bool) (rounds, polls int64) {
	h := &harness{t: b, c: c, ex: ex}
	var handled atomic.Int64
	done := make(chan struct{})
	noop := handler.Sync(func(context.Context, *handler.Message) error {
		if handled.Add(1) == int64(records) {
			close(done)
		}
		return nil
	})
	r := h.receiver(group, noop, 256, func(o *Options) {
		o.Wow = wow
		o.WowRoutingOnly = wow // as for the discard handler: reads nothing of the message
		o.Logger = zap.NewNop()
		o.ClientOpts = benchClientOpts(c)
		o.Metrics = metrics.New("bench") // counted as in production
	})
	select {
	case <-done:
	case <-time.After(time.Minute):
		b.Fatalf("receiver handled %d of %d records; snapshot %+v", handled.Load(), records, r.Snapshot())
	}
	stop(b, r) // commits what was handled; the poll loop has ended
	b.StopTimer()
	if !h.committedAtEnd(group) {
		b.Fatal("the receiver did not commit every partition to its end")
	}
	b.StartTimer()
	return r.rounds, r.polls
}
