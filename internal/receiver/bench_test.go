package receiver

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/executor"
	"github.com/wowd/wowd/internal/metrics"
)

// BenchmarkConsume measures the whole consuming path — franz-go fetching for
// a consumer group, the receiver's window and offset tracking, the shared
// executor, a no-op handler, the metrics and the final commit — against a plain franz-go
// group consumer that polls and iterates the same records and commits once
// at the end. Both run in one process with the fake broker, whose CPU they
// share: the figure is the ratio within a round (docs/benchmarks.md). Each
// iteration reads every record of the topic with a new group; ns/rec is per
// record read.
func BenchmarkConsume(b *testing.B) {
	const (
		partitions = 12
		records    = 400_000
		keys       = 10_000
		valueSize  = 100
	)
	c := newCluster(b, partitions, testTopic)
	value := make([]byte, valueSize)
	produceValues(b, c, testTopic, records, keys, func(int) []byte { return value })
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
		run  func(b *testing.B, group string)
	}{
		{"raw-franz-go", func(b *testing.B, group string) { consumeRaw(b, c, group, records) }},
		{"receiver/window=256", func(b *testing.B, group string) { consumeReceiver(b, c, ex, group, records, 256) }},
		{"receiver/window=8192", func(b *testing.B, group string) { consumeReceiver(b, c, ex, group, records, 8192) }},
	}
	for _, impl := range impls {
		b.Run("impl="+impl.name, func(b *testing.B) {
			for i := range b.N {
				impl.run(b, fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i))
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*records), "ns/rec")
		})
	}
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

func consumeReceiver(b *testing.B, c *kfake.Cluster, ex *executor.Executor, group string, records, window int) {
	h := &harness{t: b, c: c, ex: ex}
	var handled atomic.Int64
	done := make(chan struct{})
	noop := handler.Sync(func(context.Context, *handler.Message) error {
		if handled.Add(1) == int64(records) {
			close(done)
		}
		return nil
	})
	r := h.receiver(group, noop, window, func(o *Options) {
		o.Logger = zap.NewNop()
		o.ClientOpts = benchClientOpts(c)
		o.Metrics = metrics.New("bench") // counted as in production
	})
	select {
	case <-done:
	case <-time.After(time.Minute):
		b.Fatalf("receiver handled %d of %d records", handled.Load(), records)
	}
	stop(b, r) // commits what was handled
	b.StopTimer()
	if !h.committedAtEnd(group) {
		b.Fatal("the receiver did not commit every partition to its end")
	}
	b.StartTimer()
}
