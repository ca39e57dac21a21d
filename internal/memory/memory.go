// Package memory is wowd's memory budget: one limit for the whole process
// (wow.memory.limit), given to the Go runtime as its soft memory limit, and
// a share of it for the records the Kafka clients fetch ahead, split evenly
// among the receivers however many dispatchers and contexts there are.
//
// Kafka fetch limits count bytes as they travel, compressed; Wow's JSON
// compresses about eight times, so a client allowed 16 MiB per fetch holds
// up to 128 MiB of records. Each receiver's [Fetch] therefore watches the
// decompression ratio of the batches its client reads (a kgo hook) and
// sizes the client's fetches so that what it buffers, decompressed, stays
// within its part: parts / ratio / brokers, never above the configured
// fetch limits. A batch larger than the limit still comes whole (Kafka
// always returns the first batch), so the bound holds for batches smaller
// than a receiver's part.
//
// Concurrency: Budget.mu guards the member count; a Fetch's per-topic
// ratios are guarded by its topicMu (the client's fetch goroutines write
// them), and the highest is published in an atomic that its receiver's
// poll loop, which alone calls Limits, reads.
package memory

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// DefaultLimit is the limit when wow.memory.limit is empty and the process
// runs without a container memory limit (nor GOMEMLIMIT).
const DefaultLimit = 256 << 20

// ContainerShare is the part of a container's memory limit taken by
// default: the rest is headroom for what the Go runtime does not count
// (stacks of cgo calls, the binary, page cache charged to the container).
const ContainerShare = 0.8

// MinLimit is the smallest limit accepted.
const MinLimit = 32 << 20

// InitialRatio is the decompression ratio a client assumes before it has
// read a batch: twice Wow JSON's under snappy or lz4, so that the first
// fetch, sized before any batch was seen, does not overrun the budget for
// very compressible values (the limit grows as the real ratio is seen).
const InitialRatio = 16

// initialPerRecord is the compressed size of a record a client assumes
// before it has read a batch: a few hundred bytes of JSON, compressed.
const initialPerRecord = 128

// minPartitionFetch is the least a partition's fetch is sized to from the
// records it may hold: Kafka returns whole batches anyway.
const minPartitionFetch = 16 << 10

// minFetch is the least a client's fetch is ever sized to (compressed):
// Kafka returns the first batch of a fetch whole anyway, so it only keeps
// fetches from carrying a record or two; small enough
// for any budget, large enough that a fetch carries more than a handful of
// records.
const minFetch = 16 << 10

// ParseSize reads a size: bytes as an integer, or with a unit (KiB, MiB,
// GiB, or KB, MB, GB as powers of ten).
func ParseSize(text string) (int64, error) {
	text = strings.TrimSpace(text)
	s := text
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is not a size (bytes, or a number with KiB, MiB, GiB, KB, MB or GB)", text)
	}
	return n * mult, nil
}

// Source says where a limit came from, for the startup log.
type Source string

// Resolve returns the process's limit: the configured size when set, else
// ContainerShare of the container's memory limit (cgroup v2 or v1), else
// GOMEMLIMIT when the environment sets it, else DefaultLimit. root is the
// cgroup file system's mount point (CgroupRoot outside tests).
func Resolve(configured string, root string) (int64, Source, error) {
	return resolve(configured, root, func() (int64, error) {
		if os.Getenv("GOMEMLIMIT") == "" {
			return 0, nil
		}
		return debug.SetMemoryLimit(-1), nil // as the runtime read it
	})
}

// ResolveEnv is Resolve for a process started with the environment getenv
// gives rather than this one's: the limit `wowd run` would resolve there,
// reading GOMEMLIMIT as the Go runtime does. An error names GOMEMLIMIT
// when it is not a size the runtime takes.
func ResolveEnv(configured string, root string, getenv func(string) string) (int64, Source, error) {
	return resolve(configured, root, func() (int64, error) {
		v := getenv("GOMEMLIMIT")
		if v == "" {
			return 0, nil
		}
		n, ok := parseGoMemLimit(v)
		if !ok {
			return 0, fmt.Errorf("environment variable GOMEMLIMIT: %q is not a size the Go runtime takes (bytes, or a number with B, KiB, MiB, GiB or TiB; or off)", v)
		}
		return n, nil
	})
}

// CgroupRoot is where the cgroup file system is mounted.
const CgroupRoot = "/sys/fs/cgroup"

// resolve is Resolve with GOMEMLIMIT's limit from gomemlimit: 0 when it is
// not set, math.MaxInt64 when it is off.
func resolve(configured, root string, gomemlimit func() (int64, error)) (int64, Source, error) {
	if configured != "" {
		n, err := ParseSize(configured)
		if err != nil {
			return 0, "", err
		}
		return n, "wow.memory.limit", nil
	}
	if n, ok := containerLimit(root); ok {
		return int64(float64(n) * ContainerShare), Source(fmt.Sprintf("%.0f%% of the container's limit (%d bytes)", ContainerShare*100, n)), nil
	}
	n, err := gomemlimit()
	if err != nil {
		return 0, "", err
	}
	if n > 0 && n < math.MaxInt64 {
		return n, "GOMEMLIMIT", nil
	}
	return DefaultLimit, "the default (no container limit found)", nil
}

// parseGoMemLimit reads GOMEMLIMIT as the Go runtime does (its
// readGOMEMLIMIT and parseByteCount): "off", or a decimal integer of
// bytes, optionally with the unit B, KiB, MiB, GiB or TiB; ok is false for
// what the runtime refuses at start.
func parseGoMemLimit(s string) (int64, bool) {
	if s == "off" {
		return math.MaxInt64, true
	}
	mult := uint64(1)
	for _, u := range []struct {
		suffix string
		mult   uint64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"B", 1}} {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = rest, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || uint64(n) > math.MaxInt64/mult {
		return 0, false
	}
	return int64(uint64(n) * mult), true
}

// containerLimit reads the cgroup memory limit: cgroup v2's memory.max,
// else v1's memory.limit_in_bytes; "max" or a value near the largest
// int64 means none.
func containerLimit(root string) (int64, bool) {
	for _, f := range []string{root + "/memory.max", root + "/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, false
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 || n >= 1<<60 {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

// Budget is the process's memory budget. The zero value is not usable;
// see New.
type Budget struct {
	limit int64
	fetch int64 // decompressed bytes all clients may buffer together

	mu      sync.Mutex // guards members and reserved
	members int
	// reserved counts clients announced (Reserve) that have not joined
	// yet: parts are shared among members + reserved, so the first
	// clients to join do not size their first fetches to a part they
	// keep only until the others join.
	reserved int
}

// New returns a budget of limit bytes, of which fetchPercent percent are
// for the records clients buffer.
func New(limit int64, fetchPercent int) (*Budget, error) {
	if limit < MinLimit {
		return nil, fmt.Errorf("memory limit %d bytes is below the minimum %d", limit, MinLimit)
	}
	if fetchPercent < 1 || fetchPercent > 90 {
		return nil, errors.New("the fetch share must be 1 to 90 percent")
	}
	return &Budget{limit: limit, fetch: limit / 100 * int64(fetchPercent)}, nil
}

// Limit returns the process's limit in bytes.
func (b *Budget) Limit() int64 { return b.limit }

// FetchBytes returns the decompressed bytes all clients may buffer.
func (b *Budget) FetchBytes() int64 { return b.fetch }

// Apply makes the limit the Go runtime's soft memory limit. It returns the
// previous one.
func (b *Budget) Apply() int64 { return debug.SetMemoryLimit(b.limit) }

// Join adds a client to the budget. Leave undoes it.
func (b *Budget) Join() *Fetch {
	b.mu.Lock()
	b.members++
	b.reserved = max(0, b.reserved-1)
	b.mu.Unlock()
	f := &Fetch{b: b}
	f.ratio.Store(math.Float64bits(InitialRatio))
	return f
}

// Unbudgeted returns a Fetch outside any budget: its limits are the
// configured ones, apart from the partition limit that Limits derives from
// the records a partition may hold.
func Unbudgeted() *Fetch {
	f := &Fetch{}
	f.ratio.Store(math.Float64bits(InitialRatio))
	return f
}

func (b *Budget) share() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fetch / int64(max(1, b.members+b.reserved))
}

// Reserve announces n clients about to join: until each has joined, the
// parts are shared as if it had. The daemon reserves every receiver before
// making the first, whose client fetches as soon as it is made.
func (b *Budget) Reserve(n int) {
	b.mu.Lock()
	b.reserved += max(0, n)
	b.mu.Unlock()
}

// Fetch is one client's part of the budget. It is the client's
// kgo.HookFetchBatchRead (pass it to kgo.WithHooks).
type Fetch struct {
	b                 *Budget            // nil: Unbudgeted
	maxBytes, maxPart int32              // configured upper bounds (Configure)
	ratio             atomic.Uint64      // float64 bits: the highest of topicRatio: what fetches are sized by
	topicMu           sync.Mutex         // guards topicRatio
	topicRatio        map[string]float64 // per topic: decompressed / compressed bytes of its recent batches
	perRecord         atomic.Uint64      // float64 bits: compressed bytes per record of recent batches; 0 before the first
	maxBatch          atomic.Int64       // the largest compressed batch read
	held              atomic.Int64       // decompressed bytes the client's owner holds of records it took (Hold)
	left              atomic.Bool
}

// Part returns the decompressed bytes of fetched records the client and its
// owner may hold together: the client's part of the budget (0 when
// Unbudgeted: no bound).
func (f *Fetch) Part() int64 {
	if f.b == nil {
		return 0
	}
	return f.b.share()
}

// Hold tells how many decompressed bytes of records the client's owner
// holds, taken from the client but not yet passed on: Limits leaves them
// out of the client's fetches.
func (f *Fetch) Hold(n int64) { f.held.Store(n) }

// Configure sets the client's configured fetch limits
// (wow.kafka.fetch-max-bytes and fetch-max-partition-bytes): Limits never
// goes above them. It is called once, before Limits.
func (f *Fetch) Configure(maxBytes, maxPartitionBytes int32) {
	f.maxBytes, f.maxPart = maxBytes, maxPartitionBytes
}

var _ kgo.HookFetchBatchRead = (*Fetch)(nil)

// Leave removes the client from the budget: the others' parts grow.
func (f *Fetch) Leave() {
	if f.b == nil || f.left.Swap(true) {
		return
	}
	f.b.mu.Lock()
	f.b.members--
	f.b.mu.Unlock()
}

// OnFetchBatchRead notes the decompression ratio of a batch in its topic's
// moving average, weighted towards the batch when it compresses better than
// the average (the side that would overrun the budget), so the fetch size
// shrinks at once and grows back slowly. Fetches are sized by the highest
// topic's: one client reads all the topics of its context, and a topic
// that compresses far better than the others, averaged with them, would be
// fetched several times the part once it comes alone (a backlog of its
// own, a partition resuming).
func (f *Fetch) OnFetchBatchRead(_ kgo.BrokerMetadata, topic string, _ int32, m kgo.FetchBatchMetrics) {
	if m.CompressedBytes <= 0 || m.UncompressedBytes <= 0 {
		return
	}
	r := float64(m.UncompressedBytes) / float64(m.CompressedBytes)
	f.topicMu.Lock()
	if f.topicRatio == nil {
		f.topicRatio = map[string]float64{}
	}
	avg, ok := f.topicRatio[topic]
	if !ok {
		avg = InitialRatio
	}
	w := 1.0 / 16
	if r > avg {
		w = 1.0 / 2
	}
	f.topicRatio[topic] = avg + w*(r-avg)
	highest := 0.0
	for _, tr := range f.topicRatio {
		highest = max(highest, tr)
	}
	f.ratio.Store(math.Float64bits(highest))
	f.topicMu.Unlock()
	for b := int64(m.CompressedBytes); ; {
		old := f.maxBatch.Load()
		if b <= old || f.maxBatch.CompareAndSwap(old, b) {
			break
		}
	}
	if m.NumRecords > 0 {
		average(&f.perRecord, float64(m.CompressedBytes)/float64(m.NumRecords))
	}
}

// average moves the float64 in a towards v by an eighth (to v at first).
func average(a *atomic.Uint64, v float64) {
	for {
		old := a.Load()
		avg := math.Float64frombits(old)
		next := v
		if avg > 0 {
			next = avg + (v-avg)/8
		}
		if a.CompareAndSwap(old, math.Float64bits(next)) {
			return
		}
	}
}

// Ratio returns the decompression ratio the client observes (InitialRatio
// before its first batch).
func (f *Fetch) Ratio() float64 { return math.Float64frombits(f.ratio.Load()) }

// Limits returns the fetch limits for the client now, given the number of
// brokers it fetches from (each may hold one buffered fetch) and the most
// records one partition may hold unfinished (0: no such bound).
//
// The fetch limit is the client's part of the budget, less what its owner
// holds (Hold), divided by the observed ratio and the brokers, at most the configured limit and at least
// a small floor. The partition limit is also held to about twice the
// records a partition may hold, at the observed compressed size per
// record (and at least two of the batches observed): a partition paused
// for holding its share drops what was fetched for it, and fetching far
// more than it may take is decompressed again and again.
func (f *Fetch) Limits(brokers, partitionRecords int) (maxBytes, maxPartitionBytes int32) {
	n := int64(f.maxBytes)
	if f.b != nil {
		part := float64(max(0, f.b.share()-f.held.Load())) / max(1, f.Ratio()) / float64(max(1, brokers))
		n = int64(min(part, float64(f.maxBytes)))
		n = max(n, min(minFetch, int64(f.maxBytes)))
	}
	p := min(int64(f.maxPart), n)
	pr := math.Float64frombits(f.perRecord.Load())
	if pr == 0 {
		pr = initialPerRecord
	}
	if partitionRecords > 0 {
		// Never below twice the largest batch seen: Kafka returns a
		// partition's batch whole or not at all (unless it comes first in
		// the response), so a limit below a batch's size holds the
		// partition back until it comes first. A batch larger than any
		// seen before still waits for that (see docs/operations.md).
		p = min(p, max(minPartitionFetch, int64(2*pr*float64(partitionRecords)), 2*f.maxBatch.Load()))
	}
	return int32(n), int32(p)
}
