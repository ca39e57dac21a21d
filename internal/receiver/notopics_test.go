package receiver

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/testwait"
)

// A receiver none of whose topics exists at start says so
// (NoTopicsAtStart, the readiness reason), joins its group once one is
// created, and then no longer says so: a later loss of membership has
// another cause.
func TestNoTopicsAtStartUntilOneExists(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "other"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	h := harnessOn(t, c)
	r := h.newReceiver("g-no-topics", handler.Sync(func(context.Context, *handler.Message) error { return nil }), 8,
		func(o *Options) {
			o.ClientOpts = append(o.ClientOpts, kgo.MetadataMinAge(50*time.Millisecond), kgo.MetadataMaxAge(100*time.Millisecond))
		})
	r.Start(context.Background())
	defer stop(t, r)
	if got := r.NoTopicsAtStart(); !slices.Equal(got, []string{testTopic}) {
		t.Fatalf("NoTopicsAtStart = %v, want [%s]", got, testTopic)
	}
	cl, err := kgo.NewClient(brokers(c)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 1, 1, nil, testTopic); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 20*time.Second, "the receiver joined", r.Joined)
	if got := r.NoTopicsAtStart(); got != nil {
		t.Errorf("NoTopicsAtStart = %v after the receiver joined, want nil", got)
	}
}
