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

// Start listens on addr (a loopback host:port; port 0 picks one) with the
// topics created, each with partitions partitions. Topics produced to later
// (dead-letter topics) are created on first use.
func Start(addr string, partitions int, topics []string) (*Broker, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("embedded broker address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("embedded broker address %q: the dev broker listens on loopback only (use 127.0.0.1)", addr)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("embedded broker address %q: bad port", addr)
	}
	c, err := kfake.NewCluster(
		kfake.Ports(port),
		kfake.SeedTopics(int32(partitions), topics...),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(partitions),
	)
	if err != nil {
		return nil, fmt.Errorf("starting the embedded broker on %s: %w", addr, err)
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

// StartDemo begins demo traffic to the given event topics of contextName.
func StartDemo(ctx context.Context, brokers []string, contextName string, topics []string, rate int, log *zap.Logger) (*Demo, error) {
	if len(topics) == 0 {
		return nil, errors.New("demo traffic: no event topic to write to")
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
			topic := topics[i%len(topics)]
			aggregate := aggregateOf(topic)
			id := fmt.Sprintf("%s-%d", aggregate, i%5)
			versions[id]++
			rec := &kgo.Record{Topic: topic, Key: []byte(id), Value: demoEvent(contextName, aggregate, id, versions[id], i)}
			if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil && ctx.Err() == nil {
				log.Warn("demo traffic", zap.Error(err))
			}
		}
	}()
	log.Info("demo traffic started", zap.Strings("topics", topics), zap.Int("per_second", rate))
	return d, nil
}

// Wait waits for the demo goroutine to stop.
func (d *Demo) Wait() { d.wg.Wait() }

// aggregateOf returns the aggregate part of <prefix><alias>.<aggregate>.<kind>.
func aggregateOf(topic string) string {
	parts := strings.Split(topic, ".")
	if len(parts) < 2 {
		return topic
	}
	return parts[len(parts)-2]
}

// demoEvent is a domain event stream as Wow serializes it.
func demoEvent(contextName, aggregate, id string, version, n int) []byte {
	now := time.Now().UnixMilli()
	return fmt.Appendf(nil, `{"id":"demo-%d","contextName":%q,"aggregateName":%q,"header":{"trace_id":"demo-%d"},`+
		`"aggregateId":%q,"tenantId":"(0)","ownerId":"","spaceId":"","commandId":"demo-cmd-%d","requestId":"demo-cmd-%d",`+
		`"version":%d,"body":[{"id":"demo-ev-%d","name":"%s_changed","revision":"0.0.1","bodyType":"demo.%sChanged","body":{"n":%d}}],"createTime":%d}`,
		n, contextName, aggregate, n, id, n, n, version, n, aggregate, aggregate, n, now)
}
