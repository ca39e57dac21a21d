// Package devbroker runs the embedded Kafka-compatible broker of `wowd dev`
// (franz-go's kfake) and, on request, demo traffic shaped like a Wow
// service's.
package devbroker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// Broker is an embedded single-node broker.
type Broker struct {
	c *kfake.Cluster
}

// MaxPartitions is the most partitions per topic Start creates.
const MaxPartitions = 1000

// ErrSetting wraps Start's errors that come from its arguments (the
// address, the partitions): a configuration's, not the machine's.
var ErrSetting = errors.New("embedded broker setting")

// Start listens on addr (a loopback host:port; port 0 picks one) with the
// topics created, each with partitions partitions (1 to MaxPartitions).
// Topics produced to later (dead-letter topics) are created on first use.
func Start(addr string, partitions int, topics []string) (*Broker, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%w: address %q: %w", ErrSetting, addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("%w: address %q: the dev broker listens on loopback only (use 127.0.0.1)", ErrSetting, addr)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("%w: address %q: bad port", ErrSetting, addr)
	}
	if partitions < 1 || partitions > MaxPartitions {
		return nil, fmt.Errorf("%w: %d partitions per topic: want 1 to %d", ErrSetting, partitions, MaxPartitions)
	}
	opts := []kfake.Opt{
		kfake.Ports(port),
		kfake.SeedTopics(int32(partitions), topics...),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(partitions),
	}
	if host != "localhost" {
		// kfake listens on 127.0.0.1; the address configured is where
		// wowd's clients connect, so listen there ([::1], 127.0.0.2).
		opts = append(opts, kfake.ListenFn(func(network, address string) (net.Listener, error) {
			_, p, err := net.SplitHostPort(address)
			if err != nil {
				return nil, err
			}
			return net.Listen(network, net.JoinHostPort(host, p))
		}))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("starting the embedded broker on %s (%w; a second wowd dev needs other ports for the broker, metrics and admin listeners: --set 'wow.kafka.bootstrap-servers={127.0.0.1:9093},wow.metrics.listen=127.0.0.1:9474,wow.admin.listen=127.0.0.1:9476')", addr, err)
	}
	return &Broker{c: c}, nil
}

// Addr returns the broker's address.
func (b *Broker) Addr() string { return b.c.ListenAddrs()[0] }

// Close stops the broker.
func (b *Broker) Close() { b.c.Close() }

// Demo produces Wow-shaped domain event streams to topics until ctx is done,
// about rate records per second over a few aggregate IDs. It owns one
// goroutine; Wait returns when it has stopped.
type Demo struct {
	wg sync.WaitGroup
}

// DemoTopic is an event topic the demo writes to: the Wow context and
// aggregate its messages belong to, as wowd checks on receipt.
type DemoTopic struct {
	Topic, Context, Aggregate string
}

// DemoTopics returns topics, event topics named <prefix><alias>.<aggregate>.event,
// as topics of one Wow context.
func DemoTopics(contextName string, topics []string) []DemoTopic {
	out := make([]DemoTopic, len(topics))
	for i, t := range topics {
		parts := strings.Split(t, ".")
		aggregate := t
		if len(parts) >= 2 {
			aggregate = parts[len(parts)-2]
		}
		out[i] = DemoTopic{Topic: t, Context: contextName, Aggregate: aggregate}
	}
	return out
}

// StartDemo begins demo traffic to the given event topics.
func StartDemo(ctx context.Context, brokers []string, topics []DemoTopic, rate int, log *zap.Logger) (*Demo, error) {
	if len(topics) == 0 {
		return nil, errors.New("demo traffic: no event topic to write to")
	}
	names := make([]string, len(topics))
	for i, t := range topics {
		names[i] = t.Topic
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ClientID("wowd-dev-demo"))
	if err != nil {
		return nil, fmt.Errorf("demo producer: %w", err)
	}
	d := &Demo{}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer cl.Close()
		tick := time.NewTicker(time.Second / time.Duration(max(1, rate)))
		defer tick.Stop()
		versions := map[string]int{}
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			t := topics[i%len(topics)]
			id := fmt.Sprintf("%s-%d", t.Aggregate, i%5)
			versions[t.Topic+"/"+id]++
			rec := &kgo.Record{Topic: t.Topic, Key: []byte(id), Value: demoEvent(t.Context, t.Aggregate, id, versions[t.Topic+"/"+id], i)}
			if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil && ctx.Err() == nil {
				log.Warn("demo traffic", zap.Error(err))
			}
		}
	}()
	log.Info("demo traffic started", zap.Strings("topics", names), zap.Int("per_second", rate))
	return d, nil
}

// Wait waits for the demo goroutine to stop.
func (d *Demo) Wait() { d.wg.Wait() }

// demoEvent is a domain event stream as Wow serializes it.
func demoEvent(contextName, aggregate, id string, version, n int) []byte {
	now := time.Now().UnixMilli()
	return fmt.Appendf(nil, `{"id":"demo-%d","contextName":%q,"aggregateName":%q,"header":{"trace_id":"demo-%d"},`+
		`"aggregateId":%q,"tenantId":"(0)","ownerId":"","spaceId":"","commandId":"demo-cmd-%d","requestId":"demo-cmd-%d",`+
		`"version":%d,"body":[{"id":"demo-ev-%d","name":"%s_changed","revision":"0.0.1","bodyType":"demo.%sChanged","body":{"n":%d}}],"createTime":%d}`,
		n, contextName, aggregate, n, id, n, n, version, n, aggregate, aggregate, n, now)
}
