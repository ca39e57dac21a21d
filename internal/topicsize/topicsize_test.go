package topicsize

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRecordBytesCoversWhatTheClientCounts: a record of RecordBytes is
// taken by a client whose batch limit for its topic is exactly that, and
// one of a byte more is refused by the client as too large, before any
// write, whatever the sizes of its key, value and headers: RecordBytes is
// never below the client's count, and close to it.
func TestRecordBytesCoversWhatTheClientCounts(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"), kfake.BrokerConfigs(map[string]string{"message.max.bytes": "4000000"}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct{ key, value, headers int }{
		{0, 600, 0}, {8, 700, 2}, {40, 1_000, 0}, {40, 1_000, 1}, {300, 16_383, 5}, {10, 16_384, 0}, {36, 2_097_151, 3}, {36, 2_097_152, 0},
	} {
		rec := &kgo.Record{Topic: "t", Key: []byte(strings.Repeat("k", tc.key)), Value: make([]byte, tc.value), Timestamp: time.Now()}
		for i := range tc.headers {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: "h" + strconv.Itoa(i), Value: []byte("some value")})
		}
		n := RecordBytes(rec)
		produce := func(limit int) error {
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerBatchMaxBytes(int32(limit)),
				kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.MaxBufferedBytes(8<<20))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			r := *rec // the client keeps its context in the record it is given
			return cl.ProduceSync(ctx, &r).FirstErr()
		}
		if err := produce(n); err != nil {
			t.Errorf("%+v: a batch limit of RecordBytes %d refused it: %v", tc, n, err)
		}
		// Close to the client's count: 30 bytes less, and 8 per header
		// (counted for the largest framing), is refused by it.
		if less := n - 30 - 8*tc.headers; !TooLarge(produce(less)) {
			t.Errorf("%+v: a batch limit of %d, under RecordBytes %d, was not refused as too large", tc, less, n)
		}
	}
}
