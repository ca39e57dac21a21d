package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/internal/wow/wowtest"
)

// throughputTargets are issue 13's: the share of the plain consumer's
// records per second wowd should reach.
var throughputTargets = map[string]float64{"raw": 0.8, "wow": 0.6}

// A consumer under measurement: the plain franz-go process, or wowd with a
// dispatcher of a format.
type consumer struct {
	key   string // plain, raw, wow
	label string
}

var throughputConsumers = []consumer{
	{"plain", "plain franz-go"},
	{"raw", "wowd format raw"},
	{"wow", "wowd format wow"},
}

func throughput() mode {
	var records int
	var warmup bool
	return mode{
		flags: func(fs *flag.FlagSet) {
			fs.IntVar(&records, "records", 500_000, "records in the topic; every run reads all of them")
			fs.BoolVar(&warmup, "warmup", true, "read the topic once with the plain consumer before the rounds, untimed")
		},
		run: func(ctx context.Context, b *bench) error { return runThroughput(ctx, b, records, warmup) },
	}
}

// runResult is one consumer process reading the whole topic.
type runResult struct {
	elapsed   time.Duration // process start to every partition committed to its end
	first     time.Duration // process start to the first committed offset
	cpu       time.Duration // the consumer's CPU time until then
	brokerCPU time.Duration // the broker's, over the same span (0 if not ours)
	rate      float64       // records per second
	steady    float64       // records per second from the first commit on
	fetched   float64       // uncompressed bytes of the record batches fetched
	others    string        // the CPU other processes of the machine used meanwhile
	note      string        // anything wrong with the run
}

func runThroughput(ctx context.Context, b *bench, records int, warmup bool) error {
	prefix := "benchkafka-" + b.runID + "."
	topic := prefix + contextAlias + "." + aggregateName + ".event"
	if err := b.createTopic(ctx, topic, nil); err != nil {
		return err
	}
	t0 := time.Now()
	avg, err := b.produceStreams(ctx, topic, records)
	if err != nil {
		return err
	}
	ends, err := b.endOffsets(ctx, topic)
	if err != nil {
		return err
	}
	var total int64
	for _, e := range ends {
		total += e
	}
	if total != int64(records) {
		return fmt.Errorf("the topic holds %d records, want %d", total, records)
	}
	fmt.Printf("data: %s Wow event streams of %.0f bytes on average, %d aggregates, %d partitions, snappy, key = aggregate ID, topic %s (produced in %.1fs)\n",
		commas(total), avg, b.keys, b.partitions, topic, time.Since(t0).Seconds())
	fmt.Printf("each run: a new process and consumer group; commit interval %v; time from process start to every partition committed to its end\n\n", b.commitInterval)

	if warmup {
		res, err := b.consumeAll(ctx, "plain", "warmup", topic, prefix, ends, total)
		if err != nil {
			return err
		}
		fmt.Printf("warm-up  %s\n", res.line(total))
	}
	results := make(map[string][]runResult)
	for r := range b.rounds {
		for i := range throughputConsumers {
			c := throughputConsumers[(i+r)%len(throughputConsumers)] // rotated: no consumer always goes first
			res, err := b.consumeAll(ctx, c.key, fmt.Sprintf("r%d-%s", r+1, c.key), topic, prefix, ends, total)
			if err != nil {
				return err
			}
			fmt.Printf("round %d  %-16s %s\n", r+1, c.label, res.line(total))
			results[c.key] = append(results[c.key], res)
		}
	}
	printThroughput(results, total, b.rounds)
	return nil
}

func (r runResult) line(total int64) string {
	s := fmt.Sprintf("%7.3fs %9s rec/s   first commit %5.2fs, then %9s rec/s   cpu %6.2fs = %5.2f µs/rec   fetched %5.0f MB",
		r.elapsed.Seconds(), commas(int64(r.rate)), r.first.Seconds(), rateStr(r.steady), r.cpu.Seconds(), usPerRec(r.cpu, total), r.fetched/1e6)
	if r.brokerCPU > 0 {
		s += fmt.Sprintf("   broker cpu %5.2fs", r.brokerCPU.Seconds())
	}
	s += "   " + r.others
	if r.note != "" {
		s += "   !! " + r.note
	}
	return s
}

func rateStr(r float64) string {
	if math.IsNaN(r) {
		return "-"
	}
	return commas(int64(r))
}

func usPerRec(d time.Duration, n int64) float64 {
	return float64(d.Microseconds()) / float64(n)
}

// produceStreams writes n Wow event streams round-robin over b.keys
// aggregates (versions counting up per aggregate), as franz-go batches them
// by default, snappy-compressed. It returns the mean value size.
func (b *bench) produceStreams(ctx context.Context, topic string, n int) (float64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...), kgo.ProducerBatchCompression(kgo.SnappyCompression()))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	var (
		mu       sync.Mutex
		firstErr error
	)
	versions := make([]int64, b.keys)
	var bytes int64
	for j := range n {
		k := j % b.keys
		versions[k]++
		id := aggregateID(k)
		v := wowtest.EventStream(contextName, aggregateName, id, versions[k])
		bytes += int64(len(v))
		cl.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(id), Value: v}, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				firstErr = cmpOr(firstErr, err)
				mu.Unlock()
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return 0, err
	}
	if firstErr != nil {
		return 0, fmt.Errorf("produce: %w", firstErr)
	}
	return float64(bytes) / float64(n), nil
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func aggregateID(k int) string { return fmt.Sprintf("cart-%05d", k) }

// consumeAll starts a consumer process of kind key with a new group and
// times it until the group committed every partition to ends.
func (b *bench) consumeAll(ctx context.Context, key, name, topic, prefix string, ends map[int32]int64, total int64) (runResult, error) {
	group := "benchkafka-" + b.runID + "-" + name
	var (
		c           *child
		metricsAddr string
		err         error
	)
	brokerCPU0 := procCPU(b.brokerPID)
	oth := startOthers(brokerCPU0)
	switch key {
	case "plain":
		c, err = b.start(name, b.self, "plain", "-brokers", strings.Join(b.brokers, ","),
			"-topic", topic, "-group", group, "-commit-interval", b.commitInterval.String())
	default:
		c, metricsAddr, err = b.startWowd(name, wowdParams{Prefix: prefix, Format: key, Group: group, Handler: "discard"})
	}
	if err != nil {
		return runResult{}, err
	}
	started := time.Now() // just after the fork: the harness's own setup is not counted
	defer c.stop(30 * time.Second)

	var (
		res         runResult
		firstCommit int64
	)
	deadline := started.Add(b.runTimeout)
	var committed int64
	for {
		if c.exited() {
			return res, fmt.Errorf("%s exited early (%v); its log ends with:\n%s", name, c.err, c.tail())
		}
		if err := ctx.Err(); err != nil {
			return res, err
		}
		offs, err := b.adm.FetchOffsets(ctx, group)
		now := time.Now()
		if err == nil {
			committed = 0
			done := true
			for p, end := range ends {
				o, ok := offs.Lookup(topic, p)
				if ok && o.Err == nil && o.At > 0 {
					committed += o.At
				}
				done = done && ok && o.Err == nil && o.At >= end
			}
			if res.first == 0 && committed > 0 {
				res.first, firstCommit = now.Sub(started), committed
			}
			if done {
				res.elapsed = now.Sub(started)
				res.cpu = procCPU(c.cmd.Process.Pid)
				bcpu := procCPU(b.brokerPID)
				if b.brokerPID > 0 {
					res.brokerCPU = bcpu - brokerCPU0
				}
				res.others = oth.share(res.cpu + bcpu)
				break
			}
		}
		if now.After(deadline) {
			return res, fmt.Errorf("%s committed %d of %d records within %v (last offset fetch: %v); its log ends with:\n%s",
				name, committed, total, b.runTimeout, err, c.tail())
		}
		time.Sleep(20 * time.Millisecond)
	}
	res.rate = float64(total) / res.elapsed.Seconds()
	res.steady = math.NaN()
	if d := res.elapsed - res.first; d > 0 {
		res.steady = float64(total-firstCommit) / d.Seconds()
	}

	// Check that the run did what it claims.
	if metricsAddr != "" {
		out, fetched, err := wowdCounts(metricsAddr)
		switch {
		case err != nil:
			res.note = "metrics: " + err.Error()
		case int64(out["handled"]) != total:
			res.note = fmt.Sprintf("wowd_messages_total by outcome: %v, want %d handled", out, total)
		}
		res.fetched = fetched
	}
	if err := c.stop(30 * time.Second); err != nil {
		res.note = strings.TrimSpace(res.note + " stop: " + err.Error())
	}
	if key == "plain" {
		counts := parseCounts(c.out.String())
		if n := counts["records"]; n != total {
			res.note = strings.TrimSpace(fmt.Sprintf("%s read %d records, want %d", res.note, n, total))
		}
		res.fetched = float64(counts["fetched_bytes"])
	}
	return res, nil
}

func printThroughput(results map[string][]runResult, total int64, rounds int) {
	fmt.Printf("\n%-18s %10s %10s %10s %13s %12s %10s %9s\n", fmt.Sprintf("median of %d", rounds), "records/s", "min", "max", "first commit", "then rec/s", "µs CPU/rec", "fetched×")
	for _, c := range throughputConsumers {
		var rates, steady, cpus, firsts, fetched []float64
		for i, r := range results[c.key] {
			rates = append(rates, r.rate)
			steady = append(steady, r.steady)
			cpus = append(cpus, usPerRec(r.cpu, total))
			firsts = append(firsts, r.first.Seconds())
			fetched = append(fetched, r.fetched/results["plain"][i].fetched)
		}
		lo, hi := minMax(rates)
		fmt.Printf("%-18s %10s %10s %10s %12.2fs %12s %10.2f %8.1f×\n", c.label, commas(int64(median(rates))), commas(int64(lo)), commas(int64(hi)),
			median(firsts), rateStr(median(steady)), median(cpus), median(fetched))
	}
	fmt.Println("(then rec/s: from the first commit seen to the end; µs CPU/rec: the consumer process's user+system CPU until the end, per record;")
	fmt.Println(" fetched×: uncompressed bytes of the record batches its Kafka client fetched, over the plain consumer's in the same round)")
	fmt.Printf("\n%-18s %8s %8s %8s %10s\n", "ratio (per round)", "median", "min", "max", "target")
	for _, k := range []string{"raw", "wow"} {
		var ratios []float64
		for i, r := range results[k] {
			ratios = append(ratios, r.rate/results["plain"][i].rate)
		}
		m := median(ratios)
		lo, hi := minMax(ratios)
		verdict := "met"
		if m < throughputTargets[k] {
			verdict = "MISSED"
		}
		fmt.Printf("%-18s %8.2f %8.2f %8.2f %10s   %s\n", k+" / plain", m, lo, hi, fmt.Sprintf(">= %.2f", throughputTargets[k]), verdict)
	}
	// Context: the same ratios without each process's start (group join,
	// first fetch), where a run lasted past its first commit.
	for _, k := range []string{"raw", "wow"} {
		var ratios []float64
		for i, r := range results[k] {
			if q := r.steady / results["plain"][i].steady; !math.IsNaN(q) {
				ratios = append(ratios, q)
			}
		}
		if len(ratios) == 0 {
			continue
		}
		lo, hi := minMax(ratios)
		fmt.Printf("%-18s %8.2f %8.2f %8.2f   (context: then rec/s, from the first commit on)\n", k+" / plain, then", median(ratios), lo, hi)
	}
}
