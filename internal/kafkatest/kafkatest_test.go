package kafkatest_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/internal/kafkatest"
)

func TestMain(m *testing.M) { os.Exit(kafkatest.Main(m)) }

const (
	numRecords    = 1000
	numPartitions = 3
)

func TestBrokersShared(t *testing.T) {
	a, b := kafkatest.Brokers(t), kafkatest.Brokers(t)
	if a != b || a == "" {
		t.Fatalf("Brokers returned %q then %q; want the same non-empty address", a, b)
	}
}

// TestClassicGroup produces records to a new topic and consumes them back in a
// consumer group using the classic (JoinGroup/SyncGroup) protocol.
func TestClassicGroup(t *testing.T) {
	t.Parallel()
	roundTrip(t, false)
}

// TestConsumerGroupProtocol does the same with the KIP-848 "consumer" group protocol
// (ConsumerGroupHeartbeat, server-side assignment).
func TestConsumerGroupProtocol(t *testing.T) {
	t.Parallel()
	roundTrip(t, true)
}

// clientOpts are the options of every client in these tests. The short metadata
// min age lets a client see a just-created topic's partitions without the default
// 5 s wait before refreshing metadata.
func clientOpts(seeds []string) []kgo.Opt {
	return []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.MetadataMinAge(250 * time.Millisecond)}
}

func roundTrip(t *testing.T, serverSide bool) {
	seeds := kafkatest.SeedBrokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	suffix := fmt.Sprintf("%s-%d", strings.ToLower(t.Name()), time.Now().UnixNano())
	topic, group := "kafkatest-"+suffix, "kafkatest-group-"+suffix

	admCl, err := kgo.NewClient(clientOpts(seeds)...)
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)

	created, err := adm.CreateTopic(ctx, numPartitions, 1, nil, topic)
	if err == nil {
		err = created.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}

	// Produce.
	prod, err := kgo.NewClient(append(clientOpts(seeds), kgo.DefaultProduceTopic(topic))...)
	if err != nil {
		t.Fatal(err)
	}
	recs := make([]*kgo.Record, numRecords)
	for i := range recs {
		recs[i] = &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)}
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	prod.Close()

	// Consume in a group.
	opts := append(clientOpts(seeds),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.FetchMaxWait(500*time.Millisecond),
	)
	if serverSide {
		opts = append(opts, kgo.ServerSideBalancer())
	}
	cons, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()

	seen := make(map[string]bool, numRecords)
	for len(seen) < numRecords {
		fetches := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records before the deadline", len(seen), numRecords)
		}
		fetches.EachError(func(topic string, p int32, err error) {
			t.Fatalf("fetch %s/%d: %v", topic, p, err)
		})
		fetches.EachRecord(func(r *kgo.Record) {
			if want := "v" + strings.TrimPrefix(string(r.Key), "k"); string(r.Value) != want {
				t.Errorf("record %s has value %s, want %s", r.Key, r.Value, want)
			}
			seen[string(r.Key)] = true
		})
	}
	if err := cons.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}

	// Which protocol did the group really use?
	wantType := "classic"
	if serverSide {
		wantType = "consumer"
	}
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatalf("list groups: %v", err)
	}
	lg, ok := listed[group]
	if !ok {
		t.Fatalf("group %s not listed (have %v)", group, listed.Groups())
	}
	if lg.GroupType != wantType {
		t.Fatalf("group %s has type %q, want %q", group, lg.GroupType, wantType)
	}
	if serverSide {
		described, err := adm.DescribeConsumerGroups(ctx, group)
		if err == nil {
			err = described.Error()
		}
		if err != nil {
			t.Fatalf("describe consumer group: %v", err)
		}
		g := described[group]
		if len(g.Members) != 1 || len(g.AssignedPartitions()[topic]) != numPartitions {
			t.Fatalf("consumer group %s: state %s, %d members, assigned %v; want 1 member with %d partitions",
				group, g.State, len(g.Members), g.AssignedPartitions(), numPartitions)
		}
		t.Logf("KIP-848 group %s: state %s, epoch %d, assignor %s", group, g.State, g.Epoch, g.AssignorName)
	}

	// The committed offsets must cover every record.
	offsets, err := adm.FetchOffsets(ctx, group)
	if err == nil {
		err = offsets.Error()
	}
	if err != nil {
		t.Fatalf("fetch committed offsets: %v", err)
	}
	var committed int64
	offsets.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic {
			committed += o.At
		}
	})
	if committed != numRecords {
		t.Fatalf("committed offsets add up to %d, want %d: %v", committed, numRecords, offsets)
	}

	cons.Close() // leaves the group
	if _, err := adm.DeleteTopic(ctx, topic); err != nil {
		t.Logf("delete topic %s: %v", topic, err)
	}
}
