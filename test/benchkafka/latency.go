package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/internal/wow/wowtest"
)

// latencyTarget is issue 13's: wowd's p99 at most this multiple of the
// plain consumer's.
const latencyTarget = 1.5

var latencyConsumers = []consumer{
	{"plain", "plain franz-go"},
	{"wow", "wowd http, wow"},
}

func latency() mode {
	var (
		rate             int
		duration, warmup time.Duration
		warmupRun        bool
		together         bool
	)
	return mode{
		flags: func(fs *flag.FlagSet) {
			fs.IntVar(&rate, "rate", 1000, "messages per second produced")
			fs.DurationVar(&duration, "duration", 20*time.Second, "how long each run produces, after the warm-up")
			fs.DurationVar(&warmup, "warmup", 2*time.Second, "how long each run produces before the measured messages (not counted)")
			fs.BoolVar(&warmupRun, "warmup-run", true, "run the plain consumer once before the rounds, not counted (a fresh broker's JIT is cold)")
			fs.BoolVar(&together, "together", false, "run both consumers at once on the same messages (each with its group), instead of one after the other")
		},
		run: func(ctx context.Context, b *bench) error {
			return runLatency(ctx, b, rate, duration, warmup, warmupRun, together)
		},
	}
}

// pos is a record's place in Kafka.
type pos struct {
	topic     string
	partition int32
	offset    int64
}

// arrival is a record reaching the sink by the path of a consumer.
type arrival struct {
	consumer string
	pos
}

// sink is the instant HTTP sink the consumers POST to, each to a path of its
// own (/plain, /wow): it notes when each record first arrived, by the Kafka
// position headers, and answers 204.
type sink struct {
	mu      sync.Mutex
	got     map[arrival]time.Time
	count   map[[2]string]int // distinct records per consumer and topic
	dups    int
	invalid int
	url     string // without the consumer's path
	srv     *http.Server
}

func startSink() (*sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &sink{got: make(map[arrival]time.Time), count: make(map[[2]string]int), url: "http://" + ln.Addr().String()}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	p, errP := strconv.ParseInt(r.Header.Get("kafka-partition"), 10, 32)
	o, errO := strconv.ParseInt(r.Header.Get("kafka-offset"), 10, 64)
	topic := r.Header.Get("kafka-topic")
	_, _ = io.Copy(io.Discard, r.Body)
	w.WriteHeader(http.StatusNoContent)
	s.mu.Lock()
	defer s.mu.Unlock()
	if errP != nil || errO != nil || topic == "" {
		s.invalid++
		return
	}
	k := arrival{strings.TrimPrefix(r.URL.Path, "/"), pos{topic, int32(p), o}}
	if _, seen := s.got[k]; seen {
		s.dups++
		return
	}
	s.got[k] = now
	s.count[[2]string{k.consumer, topic}]++
}

func (s *sink) received(consumer, topic string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count[[2]string{consumer, topic}]
}

func (s *sink) at(k arrival) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.got[k]
	return t, ok
}

// latResult is one consumer process's run.
type latResult struct {
	n                  int
	p50, p99, p999, mx time.Duration // from the broker's append time
	ackP50, ackP99     time.Duration // from the produce acknowledgement
	cpu, brokerCPU     float64       // the consumer's and the broker's CPU, share of one core, over the measured span
	others             string        // the CPU other processes of the machine used meanwhile
	note               string
}

func runLatency(ctx context.Context, b *bench, rate int, duration, warmup time.Duration, warmupRun, together bool) error {
	s, err := startSink()
	if err != nil {
		return err
	}
	defer s.srv.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...),
		kgo.ProducerLinger(0), // each record goes at once
		kgo.ProducerBatchCompression(kgo.SnappyCompression()))
	if err != nil {
		return err
	}
	defer prod.Close()
	fmt.Printf("data: Wow event streams of about 470 bytes at %d/s for %v (after %v of warm-up, not counted), random over %d aggregates, %d partitions, snappy;\n",
		rate, duration, warmup, b.keys, b.partitions)
	fmt.Printf("latency: from the record's LogAppendTime (broker clock, ms) to its first arrival at an HTTP sink on 127.0.0.1 (%s);\n", s.url)
	if together {
		fmt.Print("both consumers run at once on the same messages, each with its own group\n\n")
	} else {
		fmt.Print("one consumer at a time, each on a topic and group of its own\n\n")
	}

	l := &latencyRun{b: b, s: s, prod: prod, rate: rate, duration: duration, warmup: warmup, versions: make([]int64, b.keys)}
	if warmupRun {
		res, err := l.run(ctx, "lat-warmup", "plain")
		if err != nil {
			return err
		}
		fmt.Printf("warm-up  %-15s %s\n", latencyConsumers[0].label, res["plain"].line())
	}
	results := make(map[string][]latResult)
	for r := range b.rounds {
		if together {
			res, err := l.run(ctx, fmt.Sprintf("lat-r%d", r+1), "plain", "wow")
			if err != nil {
				return err
			}
			for _, c := range latencyConsumers {
				fmt.Printf("round %d  %-15s %s\n", r+1, c.label, res[c.key].line())
				results[c.key] = append(results[c.key], res[c.key])
			}
			continue
		}
		for i := range latencyConsumers {
			c := latencyConsumers[(i+r)%len(latencyConsumers)]
			res, err := l.run(ctx, fmt.Sprintf("lat-r%d-%s", r+1, c.key), c.key)
			if err != nil {
				return err
			}
			fmt.Printf("round %d  %-15s %s\n", r+1, c.label, res[c.key].line())
			results[c.key] = append(results[c.key], res[c.key])
		}
	}
	s.mu.Lock()
	if s.dups > 0 || s.invalid > 0 {
		fmt.Printf("\nsink: %d duplicate deliveries, %d requests without Kafka position headers\n", s.dups, s.invalid)
	}
	s.mu.Unlock()
	printLatency(results, b.rounds)
	return nil
}

func (r latResult) line() string {
	s := fmt.Sprintf("%6d msgs  p50 %6.2f ms  p99 %6.2f ms  p99.9 %6.2f ms  max %7.2f ms   from ack: p50 %6.2f p99 %6.2f ms   cpu %4.1f%%",
		r.n, ms(r.p50), ms(r.p99), ms(r.p999), ms(r.mx), ms(r.ackP50), ms(r.ackP99), 100*r.cpu)
	if r.brokerCPU > 0 {
		s += fmt.Sprintf("   broker cpu %4.1f%%", 100*r.brokerCPU)
	}
	s += "   " + r.others
	if r.note != "" {
		s += "   !! " + r.note
	}
	return s
}

type latencyRun struct {
	b                *bench
	s                *sink
	prod             *kgo.Client
	rate             int
	duration, warmup time.Duration
	versions         []int64
}

// sent is a produced record: where it went and when its acknowledgement
// came back.
type sent struct {
	partition int32
	offset    int64
	ack       time.Time
	err       error
}

// run measures consumers on one new topic (its timestamps the broker's
// append times), each with a new group: the consumers started and waited
// for until each owns every partition, warm-up and measured messages
// produced at the rate, the sink waited for, the consumers stopped, and the
// append times read back.
func (l *latencyRun) run(ctx context.Context, name string, keys ...string) (map[string]latResult, error) {
	b := l.b
	prefix := "benchkafka-" + b.runID + "-" + name + "."
	topic := prefix + contextAlias + "." + aggregateName + ".event"
	lat := "LogAppendTime"
	if err := b.createTopic(ctx, topic, map[string]*string{"message.timestamp.type": &lat}); err != nil {
		return nil, err
	}
	children := make([]*child, len(keys))
	for i, key := range keys {
		cname, group, url := name+"-"+key, "benchkafka-"+b.runID+"-"+name+"-"+key, l.s.url+"/"+key
		var (
			c   *child
			err error
		)
		switch key {
		case "plain":
			c, err = b.start(cname, b.self, "plain", "-brokers", strings.Join(b.brokers, ","),
				"-topic", topic, "-group", group, "-commit-interval", b.commitInterval.String(), "-sink", url)
		default:
			c, _, err = b.startWowd(cname, wowdParams{Prefix: prefix, Format: key, Group: group, Handler: "http", URL: url})
		}
		if err != nil {
			return nil, err
		}
		defer c.stop(30 * time.Second)
		if err := b.waitAssigned(ctx, c, group, topic); err != nil {
			return nil, err
		}
		children[i] = c
	}

	warmN := int(float64(l.rate) * l.warmup.Seconds())
	n := warmN + int(float64(l.rate)*l.duration.Seconds())
	recs := make([]sent, n)
	var wg sync.WaitGroup
	wg.Add(n)
	var (
		cpu0  = make([]time.Duration, len(keys))
		bcpu0 time.Duration
		t0    time.Time
		oth   others
	)
	mine := func() time.Duration {
		d := procCPU(b.brokerPID)
		for _, c := range children {
			d += procCPU(c.cmd.Process.Pid)
		}
		return d
	}
	start := time.Now()
	for i := range n {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for _, c := range children {
			if c.exited() {
				return nil, fmt.Errorf("%s exited (%v); its log ends with:\n%s", c.name, c.err, c.tail())
			}
		}
		if d := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(l.rate))); d > 0 {
			time.Sleep(d)
		}
		if i == warmN {
			t0, bcpu0 = time.Now(), procCPU(b.brokerPID)
			for j, c := range children {
				cpu0[j] = procCPU(c.cmd.Process.Pid)
			}
			oth = startOthers(mine())
		}
		k := rand.IntN(b.keys)
		l.versions[k]++
		id := aggregateID(k)
		r := &kgo.Record{Topic: topic, Key: []byte(id), Value: wowtest.EventStream(contextName, aggregateName, id, l.versions[k])}
		l.prod.Produce(ctx, r, func(r *kgo.Record, err error) {
			recs[i] = sent{partition: r.Partition, offset: r.Offset, ack: time.Now(), err: err}
			wg.Done()
		})
	}
	wg.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for _, key := range keys {
		for l.s.received(key, topic) < n && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	span := time.Since(t0).Seconds()
	othShare := oth.share(mine())
	results := make(map[string]latResult)
	for j, c := range children {
		var res latResult
		res.cpu = (procCPU(c.cmd.Process.Pid) - cpu0[j]).Seconds() / span
		if b.brokerPID > 0 {
			res.brokerCPU = (procCPU(b.brokerPID) - bcpu0).Seconds() / span
		}
		res.others = othShare
		results[keys[j]] = res
	}
	for j, c := range children {
		if err := c.stop(30 * time.Second); err != nil {
			res := results[keys[j]]
			res.note = "stop: " + err.Error()
			results[keys[j]] = res
		}
	}

	appended, err := b.appendTimes(ctx, topic, n)
	if err != nil {
		return nil, err
	}
	for _, key := range keys {
		res := results[key]
		var fromAppend, fromAck []time.Duration
		var failed, lost int
		for _, s := range recs[warmN:] {
			if s.err != nil {
				failed++
				continue
			}
			p := pos{topic, s.partition, s.offset}
			at, ok := l.s.at(arrival{key, p})
			if !ok {
				lost++
				continue
			}
			fromAppend = append(fromAppend, at.Sub(appended[p]))
			fromAck = append(fromAck, at.Sub(s.ack))
		}
		slices.Sort(fromAppend)
		slices.Sort(fromAck)
		res.n = len(fromAppend)
		res.p50, res.p99, res.p999 = percentile(fromAppend, 0.5), percentile(fromAppend, 0.99), percentile(fromAppend, 0.999)
		if len(fromAppend) > 0 {
			res.mx = fromAppend[len(fromAppend)-1]
		}
		res.ackP50, res.ackP99 = percentile(fromAck, 0.5), percentile(fromAck, 0.99)
		if failed > 0 || lost > 0 {
			res.note = strings.TrimSpace(fmt.Sprintf("%s %d not produced, %d never reached the sink", res.note, failed, lost))
		}
		results[key] = res
	}
	return results, nil
}

// waitAssigned waits until the group is stable with every partition of the
// topic assigned.
func (b *bench) waitAssigned(ctx context.Context, c *child, group, topic string) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if c.exited() {
			return fmt.Errorf("%s exited (%v); its log ends with:\n%s", c.name, c.err, c.tail())
		}
		gs, err := b.adm.DescribeGroups(ctx, group)
		if err == nil {
			if g, ok := gs[group]; ok && g.Err == nil && g.State == "Stable" && len(g.AssignedPartitions()[topic]) == b.partitions {
				return nil
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("group %s did not own the %d partitions of %s within a minute", group, b.partitions, topic)
}

// appendTimes reads the n records of topic back and returns their
// timestamps, which the topic's LogAppendTime makes the broker's.
func (b *bench) appendTimes(ctx context.Context, topic string, n int) (map[pos]time.Time, error) {
	parts := make(map[int32]kgo.Offset)
	for p := range b.partitions {
		parts[int32(p)] = kgo.NewOffset().AtStart()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out := make(map[pos]time.Time, n)
	createTime := 0
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("reading the append times of %s: %d of %d records: %w", topic, len(out), n, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Attrs.TimestampType() != 1 {
				createTime++
			}
			out[pos{topic, r.Partition, r.Offset}] = r.Timestamp
		})
	}
	if createTime > 0 {
		return nil, fmt.Errorf("%s: %d records without LogAppendTime timestamps", topic, createTime)
	}
	return out, nil
}

func printLatency(results map[string][]latResult, rounds int) {
	fmt.Printf("\nlatency, append → sink, ms (median of %d; min–max)\n", rounds)
	fmt.Printf("%-16s %22s %22s %22s\n", "", "p50", "p99", "p99.9")
	for _, c := range latencyConsumers {
		var p50, p99, p999 []float64
		for _, r := range results[c.key] {
			p50 = append(p50, ms(r.p50))
			p99 = append(p99, ms(r.p99))
			p999 = append(p999, ms(r.p999))
		}
		fmt.Printf("%-16s %22s %22s %22s\n", c.label, spread(p50), spread(p99), spread(p999))
	}
	var ratios []float64
	for i, r := range results["wow"] {
		ratios = append(ratios, float64(r.p99)/float64(results["plain"][i].p99))
	}
	m := median(ratios)
	lo, hi := minMax(ratios)
	verdict := "met"
	if m > latencyTarget {
		verdict = "MISSED"
	}
	fmt.Printf("\n%-22s %8s %8s %8s %10s\n", "ratio (per round)", "median", "min", "max", "target")
	fmt.Printf("%-22s %8.2f %8.2f %8.2f %10s   %s\n", "p99 wowd / plain", m, lo, hi, fmt.Sprintf("<= %.1f", latencyTarget), verdict)
}

func spread(xs []float64) string {
	lo, hi := minMax(xs)
	return fmt.Sprintf("%.2f (%.2f–%.2f)", median(xs), lo, hi)
}
