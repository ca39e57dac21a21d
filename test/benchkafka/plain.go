package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// plainMain is the baseline: a plain franz-go group consumer process that
// polls and iterates the records (touching every key and value), with
// franz-go's autocommit at the interval wowd commits at, and the fetch
// settings of wowd's defaults (wow.kafka.fetch-*) and its balancer. With
// -sink it POSTs each record to that URL with the Kafka position headers
// wowd's http handler sends: each partition's records one at a time in
// order, the partitions of a poll in parallel, and polls again once all are
// posted. It runs until SIGTERM and then prints what it read.
func plainMain(args []string) int {
	fs := flag.NewFlagSet("plain", flag.ExitOnError)
	brokers := fs.String("brokers", "", "bootstrap servers, comma-separated")
	topic := fs.String("topic", "", "topic")
	group := fs.String("group", "", "consumer group")
	commitInterval := fs.Duration("commit-interval", time.Second, "autocommit interval")
	sink := fs.String("sink", "", "URL to POST each record to (empty: none)")
	_ = fs.Parse(args)

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	start := kgo.NewOffset().AtStart()
	var fetched fetchCounter
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(*brokers, ",")...),
		kgo.ClientID("benchkafka-plain"),
		kgo.ConsumerGroup(*group),
		kgo.ConsumeTopics(*topic),
		kgo.ConsumeStartOffset(start),
		kgo.ConsumeResetOffset(start),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.AutoCommitInterval(*commitInterval),
		kgo.FetchMaxBytes(16<<20),
		kgo.FetchMaxPartitionBytes(1<<20),
		kgo.FetchMaxWait(500*time.Millisecond),
		kgo.WithHooks(&fetched),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64 // a connection per partition stays open
	hc := &http.Client{Timeout: 10 * time.Second, Transport: tr}
	var records, bytesRead, posted, postErrors int64
	for {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				fmt.Fprintf(os.Stderr, "fetch %s/%d: %v\n", t, p, err)
			}
		})
		if *sink == "" {
			fetches.EachRecord(func(r *kgo.Record) {
				records++
				bytesRead += int64(len(r.Key) + len(r.Value))
			})
			continue
		}
		// Each partition's records in order, the partitions of the poll in
		// parallel; the next poll once all are posted.
		var wg sync.WaitGroup
		var mu sync.Mutex
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				var ok, failed, n int64
				for _, r := range p.Records {
					n += int64(len(r.Key) + len(r.Value))
					if err := post(ctx, hc, *sink, r); err != nil {
						failed++
						fmt.Fprintf(os.Stderr, "post %s/%d@%d: %v\n", r.Topic, r.Partition, r.Offset, err)
						continue
					}
					ok++
				}
				mu.Lock()
				records += int64(len(p.Records))
				bytesRead += n
				posted += ok
				postErrors += failed
				mu.Unlock()
			}()
		})
		wg.Wait()
	}
	cl.Close() // commits what was polled, leaves the group
	fmt.Printf("records=%d bytes=%d fetched_bytes=%d posted=%d post_errors=%d\n", records, bytesRead, fetched.n.Load(), posted, postErrors)
	return 0
}

// fetchCounter counts the uncompressed bytes of the record batches the
// client fetched, as kprom's fetch_bytes_total does for wowd.
type fetchCounter struct{ n atomic.Int64 }

func (c *fetchCounter) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.FetchBatchMetrics) {
	c.n.Add(int64(m.UncompressedBytes))
}

// post sends one record as wowd's http handler would, reduced to the
// headers the sink reads.
func post(ctx context.Context, hc *http.Client, url string, r *kgo.Record) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(r.Value))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("kafka-topic", r.Topic)
	req.Header.Set("kafka-partition", strconv.Itoa(int(r.Partition)))
	req.Header.Set("kafka-offset", strconv.FormatInt(r.Offset, 10))
	req.Header.Set("kafka-key", string(r.Key))
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// parseCounts reads the plain consumer's last line: records=N bytes=N ...
func parseCounts(out string) map[string]int64 {
	m := make(map[string]int64)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, f := range strings.Fields(lines[len(lines)-1]) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			m[k] = n
		}
	}
	return m
}

func httpGet(url string) (string, error) {
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(data), nil
}
