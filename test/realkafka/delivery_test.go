package realkafka

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/internal/proctest"
)

const (
	crashRecords    = 200_000
	crashPartitions = 12
	crashAggregates = 5_000
)

// TestAtLeastOnceAcrossKill9: three wowd processes in one classic consumer
// group; 200k records over 12 partitions and 5k aggregates; a random process
// is killed with SIGKILL twice during the run and restarted. Every record
// reaches the sink, first deliveries per aggregate are in offset order, and
// committed offsets never pass an undelivered record.
func TestAtLeastOnceAcrossKill9(t *testing.T) {
	atLeastOnce(t, "classic", crashRecords, 2)
}

// TestAtLeastOnceKIP848 is TestAtLeastOnceAcrossKill9 with the KIP-848
// consumer group protocol (wow.kafka.group-protocol: consumer).
func TestAtLeastOnceKIP848(t *testing.T) {
	atLeastOnce(t, "consumer", crashRecords, 2)
}

func atLeastOnce(t *testing.T, protocol string, records, kills int) {
	began := time.Now()
	e := newEnv(t, "alo"+protocol[:2])
	topic := e.topic("shop", "cart")
	e.createTopic(topic, crashPartitions)
	s := newSink(t)
	cfg := e.config("shop", []string{"cart"}, s.URL())
	cfg.GroupProtocol = protocol
	c := newCluster(e, cfg)
	procs := c.startN(3)
	group := e.group("shop")
	checkGroupType(t, e, group, protocol)

	seqs := make(map[string]int64)
	prod := e.producer()
	t0 := time.Now()
	e.produce(prod, e.keyed(topic, records, crashAggregates, seqs, 0))
	t.Logf("produced %d records over %d aggregates in %v", records, len(seqs), time.Since(t0).Round(time.Millisecond))
	ends := e.endOffsets(topic)
	if got := sum(ends); got != int64(records) {
		t.Fatalf("end offsets add up to %d, want %d", got, records)
	}

	// Kill a random process at evenly spaced points of the run and restart it.
	for k := 1; k <= kills; k++ {
		threshold := int64(records) * int64(k) / int64(kills+1)
		deadline := time.Now().Add(5 * time.Minute)
		for s.delivered.Load() < threshold {
			c.checkAlive()
			if time.Now().After(deadline) {
				c.fatalf("only %d of %d records delivered after 5 minutes", s.delivered.Load(), records)
			}
			time.Sleep(20 * time.Millisecond)
		}
		i := e.rng.IntN(len(procs))
		t.Logf("kill %d: %d records delivered; kill -9 %s", k, s.delivered.Load(), procs[i].name)
		c.kill(procs[i])
		procs[i] = c.start()
		c.waitReady(procs[i], 2*time.Minute)
	}

	waitDelivered(t, s, c, ends, nil, 6*time.Minute)
	s.checkOrder(t)
	e.waitCommittedAtEnd(group, ends, time.Minute)
	c.stopAll()
	e.checkCommittedDelivered(s, group, nil)
	c.checkLogs()
	t.Logf("RESULT %s protocol: %d records, %d kill -9, %d duplicates, took %v",
		protocol, records, kills, s.dups.Load(), time.Since(began).Round(time.Second))
}

// checkGroupType asserts the group runs the protocol wowd was configured with.
func checkGroupType(t *testing.T, e *env, group, protocol string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	listed, err := e.adm.ListGroups(ctx)
	if err != nil {
		t.Fatalf("list groups: %v", err)
	}
	lg, ok := listed[group]
	if !ok {
		t.Fatalf("group %s not listed (have %v)", group, listed.Groups())
	}
	if lg.GroupType != protocol {
		t.Fatalf("group %s has type %q, want %q", group, lg.GroupType, protocol)
	}
	t.Logf("group %s: type %s, state %s", group, lg.GroupType, lg.State)
}

// TestRollingRestart restarts three wowd processes one at a time with
// SIGTERM while records keep arriving. Each exits 0, nothing is lost, and
// with a fast sink there are no duplicates: a duplicate is only allowed where
// a revoke or shutdown could not drain in time, or partitions were lost,
// which the processes log.
func TestRollingRestart(t *testing.T) {
	rollingRestart(t, "classic", false)
}

// TestRollingRestartParkingKIP848 is TestRollingRestart with on-failure
// park under the consumer group protocol (KIP-848), each process restarted
// twice: the sink rejects one message of three aggregates for good (each
// has a message in every produced batch), so their partitions' owners keep
// writing to the parking topic, and take owner epochs, while partitions
// move with every restart. Each owner must hold a parking lease confirmed by the
// coordinator (a member at its target assignment's epoch) before it
// writes; under churn a member can stay behind the target for a while, so
// this checks that the group still settles after every restart and that
// every other message is delivered, while the three stay parked at their
// rejected message (nothing of theirs delivered past it) and `wowd parked
// list` names them.
func TestRollingRestartParkingKIP848(t *testing.T) {
	rollingRestart(t, "consumer", true)
}

// TestRollingRestartParking is TestRollingRestartParkingKIP848 with the
// classic protocol, whose lease a DescribeGroups of a Stable group
// confirms.
func TestRollingRestartParking(t *testing.T) {
	rollingRestart(t, "classic", true)
}

func rollingRestart(t *testing.T, protocol string, parking bool) {
	began := time.Now()
	name := "roll"
	if parking {
		name = "rollpk" + protocol[:2]
	}
	e := newEnv(t, name)
	topic := e.topic("shop", "cart")
	e.createTopic(topic, crashPartitions)
	s := newSink(t)
	// Fast, but slow enough that every SIGTERM finds requests in flight.
	// With parking, slower: revocations take a while to drain, so members
	// stay behind their target assignment longer during the churn.
	s.setLatency(time.Millisecond)
	if parking {
		s.setLatency(20 * time.Millisecond)
	}
	cfg := e.config("shop", []string{"cart"}, s.URL())
	cfg.GroupProtocol = protocol
	// With parking, these aggregates' message of seq rejectSeq fails for
	// good: it and every later message of theirs are parked.
	const rejectSeq = 3
	var parkedList []string
	parkedKeys := map[string]bool{}
	if parking {
		cfg.OnFailure = "park"
		for _, tp := range []string{topic + ".parked", topic + ".dlq", "wowd-parked." + e.id + ".sink"} {
			e.deleteAtEnd(tp)
		}
		parkedList = []string{"agg-7", "agg-11", "agg-13"}
		for _, k := range parkedList {
			parkedKeys[k] = true
		}
		reject := func(d *delivery) bool { return parkedKeys[d.key] && d.seq == rejectSeq }
		s.reject.Store(&reject)
	}
	c := newCluster(e, cfg)
	procs := c.startN(3)
	group := e.group("shop")

	// Produce a steady stream until the restarts are over. parked holds
	// the positions of the parked aggregates' messages from rejectSeq on:
	// the sink must never see them.
	prod := e.producer()
	var (
		produced atomic.Int64
		prodErr  error
		wg       sync.WaitGroup
		parkedMu sync.Mutex
		parked   = map[tpoKey]bool{}
		lastSeqs = map[string]int64{}
	)
	stopProd := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(e.rng.Uint64(), 1))
		seqs := make(map[string]int64)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopProd:
				return
			case <-tick.C:
			}
			recs := make([]*kgo.Record, 800)
			recSeqs := make([]int64, len(recs))
			for i := range recs {
				key := fmt.Sprintf("agg-%d", rng.IntN(crashAggregates))
				if i < len(parkedList) {
					key = parkedList[i] // a message of each parked aggregate in every batch
				}
				recs[i] = &kgo.Record{Topic: topic, Key: []byte(key), Value: wowEvent("shop", "cart", key, seqs[key], "")}
				recSeqs[i] = seqs[key]
				seqs[key]++
			}
			ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
			err := prod.ProduceSync(ctx, recs...).FirstErr()
			cancel()
			if err != nil {
				prodErr = err
				return
			}
			parkedMu.Lock()
			for i, r := range recs { // the client set each record's partition and offset
				if key := string(r.Key); parkedKeys[key] {
					lastSeqs[key] = recSeqs[i]
					if recSeqs[i] >= rejectSeq {
						parked[tpoKey{topic, r.Partition, r.Offset}] = true
					}
				}
			}
			parkedMu.Unlock()
			produced.Add(int64(len(recs)))
		}
	}()
	stopProducer := func() {
		select {
		case <-stopProd:
		default:
			close(stopProd)
		}
		wg.Wait()
	}
	t.Cleanup(stopProducer)

	settle(c, s, procs)
	restarts := len(procs)
	if parking {
		restarts *= 2 // each process twice: partitions and their parked aggregates move more often
	}
	for n := range restarts {
		i := n % len(procs)
		t.Logf("restart %d: %d produced, %d delivered; SIGTERM %s", n+1, produced.Load(), s.delivered.Load(), procs[i].name)
		c.stop(procs[i])
		if t.Failed() {
			c.fatalf("%s did not stop cleanly", procs[i].name)
		}
		procs[i] = c.start()
		c.waitReady(procs[i], 2*time.Minute)
		settle(c, s, procs)
	}
	stopProducer()
	if prodErr != nil {
		t.Fatalf("produce: %v", prodErr)
	}
	ends := e.endOffsets(topic)
	t.Logf("produced %d records during the rolling restart", sum(ends))
	if sum(ends) != produced.Load() {
		t.Fatalf("end offsets add up to %d, produced %d", sum(ends), produced.Load())
	}

	waitDelivered(t, s, c, ends, parked, 5*time.Minute)
	s.checkOrder(t)
	e.waitCommittedAtEnd(group, ends, time.Minute)
	if parking {
		for key := range parkedKeys {
			if lastSeqs[key] <= rejectSeq {
				t.Fatalf("%s: only seqs up to %d produced, none after the rejected one: the run was too short to test parking", key, lastSeqs[key])
			}
			if got := s.lastSeq(topic, key); got != rejectSeq-1 {
				t.Errorf("%s: last seq delivered %d, want %d: parked at the rejected one through every restart", key, got, rejectSeq-1)
			}
		}
		cfgPath := c.writeConfig("cli", "127.0.0.1:0")
		code, out := runWowd(t, processEnv(nil), "parked", "list", "--config", cfgPath, "--dispatcher", "sink")
		if code != 0 {
			t.Fatalf("wowd parked list: exit %d:\n%s", code, out)
		}
		for key := range parkedKeys {
			if !strings.Contains(out, " "+key+" ") {
				t.Errorf("wowd parked list does not name %s:\n%s", key, out)
			}
		}
		t.Logf("%d messages of %d aggregates parked", len(parked), len(parkedKeys))
	}
	c.stopAll()
	e.checkCommittedDelivered(s, group, parked)
	c.checkLogs()

	// Duplicates are allowed only where the logs say a drain was cut short.
	var explained []string
	for _, line := range []string{"revoke deadline passed", "unfinished at the shutdown deadline", "partitions lost", "commit on revoke"} {
		if n := c.grepAll(line); n > 0 {
			explained = append(explained, fmt.Sprintf("%q ×%d", line, n))
		}
	}
	if d := s.dups.Load(); d > 0 && len(explained) == 0 {
		t.Errorf("%d duplicates after a rolling restart with a fast sink, and no process logged a drain cut short", d)
	} else if d > 0 {
		t.Logf("%d duplicates, explained by %s", d, strings.Join(explained, ", "))
	}
	t.Logf("RESULT rolling restart (%s protocol, parking %v): %d records, %d SIGTERM restarts, %d duplicates, took %v",
		protocol, parking, sum(ends), restarts, s.dups.Load(), time.Since(began).Round(time.Second))
}

// TestConfigFlag checks the command line the other tests rely on:
// `wowd config validate --config FILE` and `wowd run --config FILE` with no
// WOWD_CONFIG in the environment, then a clean stop on SIGTERM.
func TestConfigFlag(t *testing.T) {
	e := newEnv(t, "cli")
	e.createTopic(e.topic("shop", "cart"), 1)
	s := newSink(t)
	c := newCluster(e, e.config("shop", []string{"cart"}, s.URL()))
	addr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	path := c.writeConfig("cli", addr)
	if code, out := runWowd(t, processEnv(nil), "config", "validate", "--config", path); code != 0 {
		t.Errorf("wowd config validate --config %s: exit %d, want 0:\n%s", path, code, out)
	}
	p := c.startWith("wowd-cli", addr, []string{"run", "--config", path}, processEnv(nil))
	deadline := time.Now().Add(10 * time.Second)
	for !p.exited() && time.Now().Before(deadline) {
		if _, err := scrape(addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if p.exited() {
		out, _ := os.ReadFile(p.logPath)
		t.Fatalf("wowd run --config %s: exited with %v:\n%s", path, p.state, out)
	}
	c.waitReady(p, time.Minute)
	c.stop(p)
}

// settle waits until the group has settled on procs, every one of them
// owning some of the topic's crashPartitions partitions, and records flow
// again: more than a producer tick's worth delivered meanwhile.
func settle(c *cluster, s *sink, procs []*proc) {
	c.t.Helper()
	from := s.delivered.Load()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		owned, each := 0.0, true
		for _, p := range procs {
			m, err := scrape(p.metrics)
			if err != nil {
				each = false
				break
			}
			n := 0.0
			for _, v := range m["wowd_receiver_assigned_partitions"] {
				n += v
			}
			owned += n
			each = each && n > 0
		}
		if each && owned == crashPartitions && s.delivered.Load() > from+800 {
			return
		}
		if time.Now().After(deadline) {
			c.fatalf("the group did not settle in 2 minutes: %v of %d partitions owned, %d delivered meanwhile",
				owned, crashPartitions, s.delivered.Load()-from)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
