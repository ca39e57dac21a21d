package handlers

import (
	"fmt"
	"testing"

	"github.com/wowd/wowd/internal/config"
)

// BenchmarkHTTPSinkBatch measures messages per second through the http
// sink with and without batching, at the same max-concurrency, against the
// server and the feeder of BenchmarkHTTPSink (a 5 ms endpoint on
// 127.0.0.1, 12 partitions of 1,000 aggregates, one message in flight per
// aggregate, the default window in flight in all). One op is one message.
//
//   - unbatched/max-concurrency=N: one message per request, at most N
//     requests in flight.
//   - batch=100/max-concurrency=N: batch.max-messages 100 and the default
//     linger and max-bytes, at most N requests in flight.
//
// The window bounds the messages in flight either way, so a batched sink
// has at most window/100 full batches in flight; littles-ratio is the speed
// over min(window, N × batch size) / 5 ms.
func BenchmarkHTTPSinkBatch(b *testing.B) {
	window := config.Default().Dispatch.MaxInFlight
	for _, mc := range []int{8, 64} {
		for _, size := range []int{0, 100} {
			name := fmt.Sprintf("unbatched/max-concurrency=%d", mc)
			over := map[string]any{"max-concurrency": mc}
			if size > 0 {
				name = fmt.Sprintf("batch=%d/max-concurrency=%d", size, mc)
				over["batch"] = map[string]any{"max-messages": size}
			}
			b.Run("impl="+name, func(b *testing.B) {
				srv := newBenchServer(false)
				defer srv.Close()
				s, bound := newBenchSink(b, srv.URL, over, window)
				if size > 0 {
					bound = min(window, mc*size)
				}
				f := newFeeder(s, window)
				measure(b, srv, bound, func(n int) {
					if err := f.run(n); err != nil {
						b.Fatal(err)
					}
				})
			})
		}
	}
}
