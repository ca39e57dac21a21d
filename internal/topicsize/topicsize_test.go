package topicsize

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
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

// TestExistingTopicsAreAskedAgain: a broker that does not know a topic yet
// (its metadata behind the controller's, just after a create) answers
// UNKNOWN_TOPIC_OR_PARTITION; MaxMessageBytesOfExisting asks again and
// reads the limit, where MaxMessageBytes gives up at once. A topic that
// does not exist at all is given up after the retries, with the error.
func TestExistingTopicsAreAskedAgain(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.CreateTopic("t", 1, map[string]string{"max.message.bytes": "2000000"}); err != nil {
		t.Fatal(err)
	}
	refusals := 0
	c.ControlKey(int16(kmsg.DescribeConfigs), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if refusals >= 3 {
			return nil, nil, false
		}
		refusals++
		r := req.(*kmsg.DescribeConfigsRequest)
		resp := r.ResponseKind().(*kmsg.DescribeConfigsResponse)
		for _, rs := range r.Resources {
			rr := kmsg.NewDescribeConfigsResponseResource()
			rr.ResourceType, rr.ResourceName, rr.ErrorCode = rs.ResourceType, rs.ResourceName, kerr.UnknownTopicOrPartition.Code
			resp.Resources = append(resp.Resources, rr)
		}
		return resp, nil, true
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := MaxMessageBytes(ctx, adm, "t"); !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("the lagging broker's first answer: %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}
	got, err := MaxMessageBytesOfExisting(ctx, adm, "t")
	if err != nil || got["t"] != 2_000_000 {
		t.Fatalf("MaxMessageBytesOfExisting = %v, %v; want t: 2000000 after %d refusals", got, err, refusals)
	}
	got, err = MaxMessageBytesOfExisting(ctx, adm, "missing")
	if !errors.Is(err, kerr.UnknownTopicOrPartition) || len(got) != 0 {
		t.Fatalf("a missing topic: %v, %v; want UNKNOWN_TOPIC_OR_PARTITION", got, err)
	}
}
