package realkafka

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wowd/wowd/internal/kafkatest"
)

const (
	kcatPartitions = 3
	kcatAggregates = 100
	kcatPerCodec   = 1_000 // records produced with each compression codec
	kcatAfter      = 30    // records produced after wowd stopped
)

// kcatPath returns kcat's path, or skips the test without it (fails with
// WOWD_REQUIRE_KAFKA=1: CI installs the Debian package kcat).
func kcatPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("kcat")
	if err != nil {
		if os.Getenv(kafkatest.EnvRequire) == "1" {
			t.Fatalf("kcat is not installed (%s=1; install the Debian package kcat): %v", kafkatest.EnvRequire, err)
		}
		t.Skipf("kcat is not installed (apt-get install kcat): %v", err)
	}
	return p
}

// kcat runs kcat with args and stdin, returning its stdout.
func kcat(t *testing.T, ctx context.Context, stdin []byte, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcatPath(t), args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		t.Fatalf("kcat %s: %v\nstderr:\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// TestKcatInterop: records produced by kcat (librdkafka), uncompressed and
// with every codec, reach the sink in order per aggregate; after wowd
// drained and stopped, the group's committed offsets equal the end offsets
// through kadm, and kcat, joining the same group, resumes exactly at them: it
// reads only the records produced afterwards.
func TestKcatInterop(t *testing.T) {
	began := time.Now()
	kcatPath(t)
	e := newEnv(t, "kcat")
	topic := e.topic("shop", "cart")
	e.createTopic(topic, kcatPartitions)
	s := newSink(t)
	s.keepFor(func(string) bool { return true })
	c := newCluster(e, e.config("shop", []string{"cart"}, s.URL()))
	p := c.startN(1)[0]
	group := e.group("shop")

	seqs := make(map[string]int64)
	lines := func(n int) []byte {
		var b bytes.Buffer
		for range n {
			key := fmt.Sprintf("kc-agg-%d", e.rng.IntN(kcatAggregates))
			fmt.Fprintf(&b, "%s:%s\n", key, wowEvent("shop", "cart", key, seqs[key], "kcat"))
			seqs[key]++
		}
		return b.Bytes()
	}
	produced := 0
	for _, codec := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		kcat(t, e.ctx, lines(kcatPerCodec), "-b", e.brokers, "-P", "-t", topic, "-K:", "-z", codec, "-H", "producer=kcat")
		produced += kcatPerCodec
	}
	ends := e.endOffsets(topic)
	if sum(ends) != int64(produced) {
		t.Fatalf("end offsets add up to %d, kcat produced %d", sum(ends), produced)
	}
	waitDelivered(t, s, c, ends, nil, 2*time.Minute)
	s.checkOrder(t)
	revoked, lost := rebalanceEvents(t, p)
	checkNoDuplicates(t, s, revoked, lost)
	// The record header kcat set arrives as a request header.
	if h := s.headersOf(tpoKey{topic, 0, 0}); h == nil || h.Get("Kafka-Header-Producer") != "kcat" {
		t.Errorf("the first record of partition 0 arrived without kafka-header-producer: kcat (headers %v)", h)
	}

	// Offsets wowd committed, read by standard tooling.
	e.waitCommittedAtEnd(group, ends, time.Minute)
	c.stop(p)
	cm, err := e.committed(group)
	if err != nil {
		t.Fatalf("kadm FetchOffsets %s: %v", group, err)
	}
	for _, tp := range sortedTPs(ends) {
		if cm[tp] != ends[tp] {
			t.Errorf("kadm: %s committed %s[%d] at %d, want the end offset %d", group, tp.topic, tp.partition, cm[tp], ends[tp])
		}
	}
	t.Logf("kadm: group %s committed %s (end offsets %s)", group, fmtOffsets(cm), fmtOffsets(ends))

	// kcat joins the group: with auto.offset.reset=earliest it would read all
	// from the start if it did not see the committed offsets.
	kcat(t, e.ctx, lines(kcatAfter), "-b", e.brokers, "-P", "-t", topic, "-K:")
	out := kcat(t, e.ctx, nil, "-b", e.brokers, "-G", group, "-X", "auto.offset.reset=earliest",
		"-e", "-q", "-f", "%p %o %k\n", topic)
	var read int
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			t.Errorf("kcat output line %q", sc.Text())
			continue
		}
		part, _ := strconv.ParseInt(f[0], 10, 32)
		off, _ := strconv.ParseInt(f[1], 10, 64)
		if end := ends[tpKey{topic, int32(part)}]; off < end {
			t.Errorf("kcat in group %s read %s[%d]@%d, below wowd's committed offset %d", group, topic, part, off, end)
		}
		read++
	}
	if read != kcatAfter {
		t.Errorf("kcat in group %s read %d records, want the %d produced after wowd stopped:\n%s", group, read, kcatAfter, out)
	}
	c.checkLogs()
	t.Logf("RESULT kcat: %d records from kcat (5 codecs) delivered, kcat resumed group %s at wowd's offsets (%d new records), took %v",
		produced, group, read, time.Since(began).Round(time.Second))
}
