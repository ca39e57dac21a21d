package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/internal/config"
	"github.com/wowd/wowd/internal/daemon"
	"github.com/wowd/wowd/internal/testwait"
)

// TestKafkaMetricsAreDocumented: the Kafka client metrics come from
// franz-go's kprom plugin, not from metrics.Catalog, and a counter with
// labels is only registered once it has a series, so the catalog check
// cannot see them. This runs a client with the daemon's options through a
// produce and a fetch against kfake and requires every wowd_kafka_* metric
// it exports to be in metrics.md. (The error counters stay absent from a
// healthy client; they are documented all the same.)
func TestKafkaMetricsAreDocumented(t *testing.T) {
	const topic = "t"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	k := config.Default().Kafka
	k.BootstrapServers = c.ListenAddrs()
	reg := prometheus.NewRegistry()
	opts, err := daemon.ClientOptions(k, "docs", nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.ConsumeTopics(topic))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if fs := cl.PollFetches(ctx); fs.NumRecords() == 0 {
		t.Fatalf("fetched nothing: %v", fs.Errors())
	}
	// The client counts a written batch in a hook that may run after the
	// produce's promise: wait for it.
	var families []*dto.MetricFamily
	testwait.For(t, 10*time.Second, "the produce and fetch counters", func() bool {
		if families, err = reg.Gather(); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range families {
			if f.GetName() == "wowd_kafka_produce_bytes_total" || f.GetName() == "wowd_kafka_fetch_bytes_total" {
				n++
			}
		}
		return n == 2
	})
	doc := string(metricsDoc())
	exported := map[string]bool{}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "wowd_kafka_") {
			continue
		}
		exported[f.GetName()] = true
		if !strings.Contains(doc, "`"+f.GetName()+"`") {
			t.Errorf("metrics.md lacks %s (%s)", f.GetName(), f.GetHelp())
		}
	}
	for _, name := range []string{"wowd_kafka_produce_bytes_total", "wowd_kafka_fetch_bytes_total"} {
		if !exported[name] {
			t.Errorf("%s not exported: the client did not produce and fetch (exported: %v)", name, exported)
		}
	}
}
