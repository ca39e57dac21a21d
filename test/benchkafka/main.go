// Command benchkafka measures wowd as a process against a real Apache Kafka
// broker, next to a plain franz-go consumer process reading the same data in
// the same run.
//
//	benchkafka throughput [flags]   make bench-kafka
//	benchkafka latency [flags]      make bench-latency
//
// throughput writes Wow domain event streams (about 470 bytes, 10,000
// aggregates, 12 partitions, snappy, key = aggregate ID) to a Wow event topic
// once, then each round starts three consumer processes one after the other,
// each with a consumer group of its own: the plain franz-go consumer (this
// binary's "plain" command: poll, iterate, commit), `wowd run` with a
// dispatcher of format raw and the discard handler, and `wowd run` with
// format wow and the discard handler. A run's time goes from starting the
// process to the moment the group's committed offsets, polled with kadm,
// reach the end of every partition.
//
// latency produces at 1,000 messages per second to a topic whose timestamps
// are the broker's append times and measures, from that time to the instant
// an HTTP sink served by this program receives the record, the p50 and p99
// of wowd (http handler, format wow) and of the plain consumer POSTing each
// record to the same kind of sink; the consumers take turns, or with
// -together read the same messages at once.
//
// Without -brokers (or WOWD_KAFKA_BROKERS) the program starts a broker with
// scripts/kafka-local, with a state file of its own and a watchdog on this
// process, and stops it at the end. It prints medians of ratios taken within
// a round, with their range: see docs/benchmarks.md.
//
// The package is a main package, not a test: `go test ./...` never runs it.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/template"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The data of both modes: the names of the Wow example domain, so that the
// values are of the size wowtest documents and format wow accepts them on
// the topic <prefix>example.cart.event.
const (
	contextName   = "example-service"
	contextAlias  = "example"
	aggregateName = "cart"
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	var code int
	switch os.Args[1] {
	case "throughput":
		code = runMode(os.Args[2:], throughput())
	case "latency":
		code = runMode(os.Args[2:], latency())
	case "plain":
		code = plainMain(os.Args[2:])
	default:
		usage()
		code = 2
	}
	os.Exit(code)
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage: benchkafka throughput|latency [flags]   (-h for the flags)
       benchkafka plain [flags]                (the baseline consumer; started by the other two)`)
}

// bench is what both modes share.
type bench struct {
	rounds         int
	wowd           string
	self           string // this binary, for the plain consumer
	brokers        []string
	dir            string // configurations and logs
	runID          string
	partitions     int
	keys           int
	commitInterval time.Duration
	runTimeout     time.Duration
	brokerPID      int // 0 when the broker is not ours
	adm            *kadm.Client
	cl             *kgo.Client
	topics         []string // created here, deleted at the end
}

// mode is one of the measurements: its own flags and its run.
type mode struct {
	flags func(fs *flag.FlagSet)
	run   func(ctx context.Context, b *bench) error
}

// runMode parses the common flags, gets a broker and runs the mode.
func runMode(args []string, m mode) int {
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	b := &bench{}
	brokers := fs.String("brokers", os.Getenv("WOWD_KAFKA_BROKERS"), "bootstrap servers, comma-separated (default $WOWD_KAFKA_BROKERS; empty: start one with scripts/kafka-local)")
	fs.IntVar(&b.rounds, "rounds", 3, "rounds; each runs every consumer once")
	fs.StringVar(&b.wowd, "wowd", "bin/wowd", "the wowd binary (make build)")
	fs.IntVar(&b.partitions, "partitions", 12, "partitions of the topics")
	fs.IntVar(&b.keys, "keys", 10_000, "aggregates (record keys)")
	fs.DurationVar(&b.commitInterval, "commit-interval", 100*time.Millisecond, "commit interval of every consumer (wow.kafka.commit-interval; the plain consumer's autocommit)")
	fs.DurationVar(&b.runTimeout, "run-timeout", 5*time.Minute, "longest a single run may take")
	keep := fs.Bool("keep", false, "keep the directory of configurations and logs")
	m.flags(fs)
	_ = fs.Parse(args)

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	var err error
	if b.self, err = os.Executable(); err != nil {
		return fail(err)
	}
	if b.wowd, err = filepath.Abs(b.wowd); err != nil {
		return fail(err)
	}
	if _, err := os.Stat(b.wowd); err != nil {
		return fail(fmt.Errorf("wowd binary: %w (run make build)", err))
	}
	if b.dir, err = os.MkdirTemp("", "benchkafka-"); err != nil {
		return fail(err)
	}
	defer func() {
		if *keep {
			fmt.Printf("configurations and logs kept in %s\n", b.dir)
		} else {
			_ = os.RemoveAll(b.dir)
		}
	}()
	b.runID = strconv.FormatInt(time.Now().Unix()%1e8, 36)

	if *brokers == "" {
		addr, pid, stop, err := startBroker(b.dir)
		if err != nil {
			return fail(err)
		}
		defer stop()
		*brokers, b.brokerPID = addr, pid
	} else {
		fmt.Printf("broker: %s (given; its CPU is not measured)\n", *brokers)
	}
	b.brokers = strings.Split(*brokers, ",")
	if b.cl, err = kgo.NewClient(kgo.SeedBrokers(b.brokers...)); err != nil {
		return fail(err)
	}
	defer b.cl.Close()
	b.adm = kadm.NewClient(b.cl)
	defer b.deleteTopics()

	fmt.Printf("machine: %d CPUs (%s), %s, load %s; %s; %s\n", numCPU(), cpuModel(), kernel(), loadavg(), wowdVersion(b.wowd), time.Now().UTC().Format(time.RFC3339))
	if err := m.run(ctx, b); err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, "benchkafka: interrupted")
			return 1
		}
		fmt.Fprintf(os.Stderr, "benchkafka: %v\n(configurations and logs in %s)\n", err, b.dir)
		*keep = true
		return 1
	}
	return 0
}

func fail(err error) int {
	fmt.Fprintf(os.Stderr, "benchkafka: %v\n", err)
	return 1
}

// startBroker starts a broker with scripts/kafka-local under a state file of
// its own (so that it never touches a broker someone else started) and a
// watchdog that stops it if this process dies.
func startBroker(dir string) (addr string, pid int, stop func(), err error) {
	root, err := repoRoot()
	if err != nil {
		return "", 0, nil, err
	}
	script := filepath.Join(root, "scripts", "kafka-local")
	state := filepath.Join(dir, "kafka.state")
	env := append(os.Environ(), "KAFKA_LOCAL_STATE="+state, "KAFKA_LOCAL_WATCH_PID="+strconv.Itoa(os.Getpid()))
	fmt.Println("broker: starting one with scripts/kafka-local (the first start on a machine fetches its jars with Maven)...")
	cmd := exec.Command(script, "start")
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", 0, nil, fmt.Errorf("scripts/kafka-local start: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	addr = strings.TrimSpace(lines[len(lines)-1])
	if st, err := os.ReadFile(state); err == nil {
		for _, l := range strings.Split(string(st), "\n") {
			if v, ok := strings.CutPrefix(l, "PID="); ok {
				pid, _ = strconv.Atoi(v)
			}
		}
	}
	fmt.Printf("broker: %s (pid %d, Apache Kafka via scripts/kafka-local)\n", addr, pid)
	stop = func() {
		cmd := exec.Command(script, "stop")
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "scripts/kafka-local stop: %v\n%s", err, out)
		}
	}
	return addr, pid, stop, nil
}

// repoRoot is the repository holding the working directory: the first
// directory upwards with scripts/kafka-local.
func repoRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "scripts", "kafka-local")); err == nil {
			return d, nil
		}
		up := filepath.Dir(d)
		if up == d {
			return "", errors.New("scripts/kafka-local not found above the working directory: run from the repository")
		}
		d = up
	}
}

func (b *bench) createTopic(ctx context.Context, topic string, configs map[string]*string) error {
	r, err := b.adm.CreateTopic(ctx, int32(b.partitions), 1, configs, topic)
	if err == nil {
		err = r.Err
	}
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	b.topics = append(b.topics, topic)
	// Wait until every partition has a leader.
	for range 100 {
		md, err := b.adm.Metadata(ctx, topic)
		if err == nil {
			if t, ok := md.Topics[topic]; ok && t.Err == nil && len(t.Partitions) == b.partitions {
				ready := true
				for _, p := range t.Partitions {
					ready = ready && p.Leader >= 0 && p.Err == nil
				}
				if ready {
					return nil
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("topic %s: partitions without a leader", topic)
}

func (b *bench) deleteTopics() {
	if len(b.topics) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = b.adm.DeleteTopics(ctx, b.topics...)
}

// endOffsets returns the end offset of every partition of topic.
func (b *bench) endOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	lo, err := b.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	ends := make(map[int32]int64)
	var ferr error
	lo.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			ferr = o.Err
		}
		ends[o.Partition] = o.Offset
	})
	if ferr == nil && len(ends) != b.partitions {
		ferr = fmt.Errorf("end offsets of %d partitions, want %d", len(ends), b.partitions)
	}
	return ends, ferr
}

// ---------------------------------------------------------------- processes

// child is a consumer process.
type child struct {
	name string
	cmd  *exec.Cmd
	log  string
	out  bytes.Buffer // stdout
	done chan struct{}
	err  error
}

func (b *bench) start(name string, args ...string) (*child, error) {
	c := &child{name: name, log: filepath.Join(b.dir, name+".log"), done: make(chan struct{})}
	f, err := os.Create(c.log)
	if err != nil {
		return nil, err
	}
	c.cmd = exec.Command(args[0], args[1:]...)
	c.cmd.Stdout = io.MultiWriter(&c.out, f)
	c.cmd.Stderr = f
	if err := c.cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	go func() {
		c.err = c.cmd.Wait()
		f.Close()
		close(c.done)
	}()
	return c, nil
}

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits for the exit, killing the process after
// timeout.
func (c *child) stop(timeout time.Duration) error {
	if c.exited() {
		return c.err
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		return c.err
	case <-time.After(timeout):
		_ = c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("%s did not stop within %v; killed", c.name, timeout)
	}
}

// tail returns the last lines of the child's log.
func (c *child) tail() string {
	data, _ := os.ReadFile(c.log)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}

// procCPU returns the CPU time (user + system) a process used so far, from
// /proc (clock ticks of 10 ms); 0 if it cannot be read.
func procCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	// After the command: state is field 3, utime 14, stime 15.
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond
}

// ---------------------------------------------------------------- wowd

var wowdConfig = template.Must(template.New("wowd.yaml").Parse(`# Written by test/benchkafka.
wow:
  service: benchkafka
  kafka:
    bootstrap-servers: [{{range $i, $b := .Brokers}}{{if $i}}, {{end}}"{{$b}}"{{end}}]
    topic-prefix: "{{.Prefix}}"
    commit-interval: {{.CommitInterval}}
  contexts:
    ` + contextName + `:
      alias: ` + contextAlias + `
      aggregates: [` + aggregateName + `]
  dispatchers:
    bench:
      topics: [event]
      format: {{.Format}}
      group-id: "{{.Group}}"
      handler:
        type: {{.Handler}}
{{- if .URL}}
        url: {{.URL}}
{{- end}}
  metrics:
    listen: {{.Metrics}}
  log:
    level: info
  shutdown:
    timeout: 10s
`))

type wowdParams struct {
	Brokers        []string
	Prefix         string
	CommitInterval time.Duration
	Format         string
	Group          string
	Handler        string
	URL            string
	Metrics        string
}

// startWowd writes a configuration and starts `wowd run` with it; it returns
// the process and the address of its metrics.
func (b *bench) startWowd(name string, p wowdParams) (*child, string, error) {
	p.Brokers, p.CommitInterval = b.brokers, b.commitInterval
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	p.Metrics = "127.0.0.1:" + strconv.Itoa(port)
	var buf bytes.Buffer
	if err := wowdConfig.Execute(&buf, p); err != nil {
		return nil, "", err
	}
	path := filepath.Join(b.dir, name+".yaml")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return nil, "", err
	}
	c, err := b.start(name, b.wowd, "run", "--config", path)
	return c, p.Metrics, err
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// wowdCounts scrapes a wowd's /metrics: wowd_messages_total by outcome, and
// the uncompressed bytes of the record batches its Kafka clients fetched
// (kprom's wowd_kafka_fetch_bytes_total or, with consistent naming,
// wowd_kafka_fetch_uncompressed_bytes_total).
func wowdCounts(addr string) (outcomes map[string]float64, fetched float64, err error) {
	resp, err := httpGet("http://" + addr + "/metrics")
	if err != nil {
		return nil, 0, err
	}
	outcomes = make(map[string]float64)
	sc := bufio.NewScanner(strings.NewReader(resp))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(l, "wowd_messages_total{"):
			_, rest, _ := strings.Cut(l, `outcome="`)
			outcome, _, _ := strings.Cut(rest, `"`)
			outcomes[outcome] += v
		case strings.HasPrefix(l, "wowd_kafka_fetch_bytes_total{"), strings.HasPrefix(l, "wowd_kafka_fetch_uncompressed_bytes_total{"):
			fetched += v
		}
	}
	return outcomes, fetched, sc.Err()
}

func wowdVersion(path string) string {
	out, err := exec.Command(path, "version").Output()
	if err != nil {
		return "(version unknown)"
	}
	return strings.TrimSpace(string(out))
}

// ---------------------------------------------------------------- machine

func numCPU() int {
	data, _ := os.ReadFile("/proc/cpuinfo")
	return max(1, strings.Count(string(data), "\nprocessor\t")+boolInt(strings.HasPrefix(string(data), "processor\t")))
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func cpuModel() string {
	data, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
		}
	}
	return "unknown CPU"
}

// machineCPU returns the CPU time every process of the machine used so far
// (user, nice, system, irq, softirq: /proc/stat) and the time stolen by the
// hypervisor.
func machineCPU() (busy, steal time.Duration) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0
	}
	var v [8]int64
	for i := range v {
		v[i], _ = strconv.ParseInt(f[i+1], 10, 64)
	}
	tick := 10 * time.Millisecond
	return time.Duration(v[0]+v[1]+v[2]+v[5]+v[6]) * tick, time.Duration(v[7]) * tick
}

// others measures, over a span, the CPU that processes other than this
// program, its consumers and its broker used: on a shared machine, what
// competed with the measurement.
type others struct {
	t          time.Time
	busy, mine time.Duration
	steal      time.Duration
}

// startOthers begins a span; mine is the CPU used so far by the processes
// of the measurement other than this program (consumers, broker).
func startOthers(mine time.Duration) others {
	busy, steal := machineCPU()
	return others{t: time.Now(), busy: busy, mine: mine + procCPU(os.Getpid()), steal: steal}
}

// busyShare is the share of one core other processes may take during a run
// before its line is marked: the figures of such a run say more about the
// machine than about the consumers.
const busyShare = 0.25

// share ends the span: the other processes' CPU as a share of one core, and
// the hypervisor's steal, marked when more than busyShare.
func (o others) share(mine time.Duration) string {
	busy, steal := machineCPU()
	span := time.Since(o.t).Seconds()
	other := max(0, ((busy-o.busy)-(mine+procCPU(os.Getpid())-o.mine)).Seconds()) / span
	s := fmt.Sprintf("other procs %3.0f%%", 100*other)
	st := (steal - o.steal).Seconds() / span
	if st >= 0.01 {
		s += fmt.Sprintf(" steal %3.0f%%", 100*st)
	}
	if other+st > busyShare {
		s += " (BUSY MACHINE)"
	}
	return s
}

// loadavg is the machine's 1-minute load average.
func loadavg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

func kernel() string {
	data, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown kernel"
	}
	return "Linux " + strings.TrimSpace(string(data))
}
