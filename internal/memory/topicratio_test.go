package memory

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// batchOf reports a batch of topic to f, as the client's hook does.
func batchOf(f *Fetch, topic string, compressed, uncompressed int) {
	f.OnFetchBatchRead(kgo.BrokerMetadata{}, topic, 0, kgo.FetchBatchMetrics{NumRecords: 10, CompressedBytes: compressed, UncompressedBytes: uncompressed})
}

// A receiver consumes every topic of its bounded context (each aggregate's
// commands, events, state) with one client, and the budget's claim is that
// its fetches hold no more than its part "whatever their data's
// compression". The client kept one moving average of the ratio over all
// the batches it reads, whatever their topic: while one topic (here an
// uncompressed command topic with steady traffic) brings most of the
// batches, the average forgot the other topic's 10× compression, and a
// fetch that then comes from that topic (its backlog, a burst) holds
// several times the part, decompressed, although nothing compresses better
// than what the client has seen all along.
func TestFetchLimitsHoldForTopicsThatCompressDifferently(t *testing.T) {
	b, err := New(32<<20, 10) // a part of 3.3 MB
	if err != nil {
		t.Fatal(err)
	}
	f := b.Join()
	f.Configure(16<<20, 16<<20) // the configured limits do not bound it here
	// Both topics are read all along: an event batch (10×) every 40
	// command batches (1×).
	for range 20 {
		batchOf(f, "events", 1000, 10_000)
		for range 40 {
			batchOf(f, "commands", 1000, 1000)
		}
	}
	got, _ := f.Limits(1, 0)
	// A fetch of that many compressed bytes of the event topic.
	held := int64(got) * 10
	t.Logf("ratio %.2f, fetch limit %d compressed; a fetch of events holds %d bytes; the part is %d", f.Ratio(), got, held, f.Part())
	if held > f.Part()*5/4 {
		t.Fatalf("a fetch of the 10x-compressed topic holds %d bytes decompressed, %.1f× the client's part %d: the ratio the fetch is sized by (%.2f) is an average over both topics",
			held, float64(held)/float64(f.Part()), f.Part(), f.Ratio())
	}
}
