package park

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestStateTopicOfSeveralPartitionsIsRefused: a state topic created by hand
// with more than one partition is refused by its readers, with the reason,
// instead of read out of order (Kafka orders records only within a
// partition, and owner epochs and requests rely on that order).
func TestStateTopicOfSeveralPartitionsIsRefused(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "state-3"), kfake.SeedTopics(1, "state-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	opts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	if _, err := ReadState(ctx, opts, adm, "state-1"); err != nil {
		t.Fatalf("a state topic of one partition: %v", err)
	}
	_, err = ReadState(ctx, opts, adm, "state-3")
	if err == nil || !strings.Contains(err.Error(), "state-3 has 3 partitions: it must have exactly one") {
		t.Fatalf("reading a state topic of 3 partitions: %v", err)
	}
	tail, err := NewTail(opts, "state-3", func(string, *State) {}, func(error) {})
	if err != nil {
		t.Fatal(err)
	}
	tctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); tail.Run(tctx) }()
	err = tail.CaughtUp(ctx)
	stop()
	<-done
	if err == nil || !strings.Contains(err.Error(), "must have exactly one") {
		t.Fatalf("following a state topic of 3 partitions: %v", err)
	}
}
