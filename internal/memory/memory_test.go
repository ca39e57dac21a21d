package memory

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"1024": 1024, "64MiB": 64 << 20, "1 GiB": 1 << 30, "500MB": 500e6, "2KiB": 2048, "10B": 10,
	} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-1", "12XB", "MiB", "1.5GiB", "99999999999GiB"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
}

func TestResolve(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	write := func(t *testing.T, name, content string) string {
		dir := t.TempDir()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	cases := []struct {
		name, configured, root string
		want                   int64
		source                 string
	}{
		{"configured wins", "100MiB", write(t, "memory.max", "1073741824\n"), 100 << 20, "wow.memory.limit"},
		{"cgroup v2", "", write(t, "memory.max", "1073741824\n"), 858993459, "container"},
		{"cgroup v1", "", write(t, "memory/memory.limit_in_bytes", "536870912\n"), 429496729, "container"},
		{"cgroup v2 unlimited", "", write(t, "memory.max", "max\n"), DefaultLimit, "default"},
		{"cgroup v1 unlimited", "", write(t, "memory/memory.limit_in_bytes", "9223372036854771712\n"), DefaultLimit, "default"},
		{"no cgroup", "", t.TempDir(), DefaultLimit, "default"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, src, err := Resolve(c.configured, c.root)
			if err != nil || got != c.want || !strings.Contains(string(src), c.source) {
				t.Fatalf("Resolve = %d, %q, %v; want %d from %s", got, src, err, c.want, c.source)
			}
		})
	}
	if _, _, err := Resolve("lots", t.TempDir()); err == nil {
		t.Fatal("a bad size was accepted")
	}
}

func TestNewRefusesBadBudgets(t *testing.T) {
	if _, err := New(MinLimit-1, 10); err == nil {
		t.Error("a limit below the minimum was accepted")
	}
	for _, p := range []int{0, 91} {
		if _, err := New(DefaultLimit, p); err == nil {
			t.Errorf("fetch share %d%% was accepted", p)
		}
	}
}

// batch reports a batch of the given sizes to f, as the client's hook does.
func batch(f *Fetch, compressed, uncompressed int) {
	f.OnFetchBatchRead(kgo.BrokerMetadata{}, "t", 0, kgo.FetchBatchMetrics{CompressedBytes: compressed, UncompressedBytes: uncompressed})
}

// The clients of one budget together buffer no more than its fetch share,
// decompressed, whatever their number and their data's compression.
func TestFetchLimitsKeepTheSumWithinTheShare(t *testing.T) {
	b, err := New(256<<20, 10)
	if err != nil {
		t.Fatal(err)
	}
	const configured, configuredPart = 16 << 20, 1 << 20
	a := b.Join()
	a.Configure(configured, configuredPart)
	// Before any batch: the initial ratio is assumed.
	if got, _ := a.Limits(1, 0); got != int32(b.FetchBytes()/InitialRatio) {
		t.Fatalf("one client before any batch: limit %d; want share / %d = %d", got, InitialRatio, b.FetchBytes()/InitialRatio)
	}
	// Uncompressed data: the share (25.6 MiB) is above the configured
	// limit, which stays the bound.
	for range 200 {
		batch(a, 1000, 1000)
	}
	if got, part := a.Limits(1, 0); got != configured || part != configuredPart {
		t.Fatalf("one client, no compression: limits %d, %d; want the configured %d, %d", got, part, configured, configuredPart)
	}
	// JSON compressed 8x: the fetch shrinks at once to share / 8.
	batch(a, 1000, 8000)
	batch(a, 1000, 8000)
	batch(a, 1000, 8000)
	batch(a, 1000, 8000)
	if r := a.Ratio(); r < 7 || r > 8 {
		t.Fatalf("ratio after four 8x batches = %.2f; want close to 8", r)
	}
	got, part := a.Limits(1, 0)
	if buffered := float64(got) * a.Ratio(); buffered > float64(b.FetchBytes())*1.001 {
		t.Fatalf("one client buffers up to %.0f bytes decompressed; the share is %d", buffered, b.FetchBytes())
	}
	if part != configuredPart {
		t.Fatalf("partition limit %d; want the configured %d (below the fetch limit)", part, configuredPart)
	}
	// Six clients of the same data, three brokers each: every one gets a
	// sixth of the share, split over its brokers.
	clients := []*Fetch{a}
	for range 5 {
		f := b.Join()
		f.Configure(configured, configuredPart)
		for range 8 {
			batch(f, 1000, 8000)
		}
		clients = append(clients, f)
	}
	var sum float64
	for _, f := range clients {
		got, part := f.Limits(3, 0)
		sum += 3 * float64(got) * f.Ratio()
		if part > got {
			t.Fatalf("partition limit %d above the fetch limit %d", part, got)
		}
	}
	if sum > float64(b.FetchBytes())*1.001 {
		t.Fatalf("six clients on three brokers buffer up to %.0f bytes; the share is %d", sum, b.FetchBytes())
	}
	// A client leaving gives its part back, once.
	before, _ := a.Limits(1, 0)
	clients[5].Leave()
	clients[5].Leave()
	if after, _ := a.Limits(1, 0); after <= before || after > before*6/5+1 {
		t.Fatalf("limit after one of six left: %d; want about 6/5 of %d", after, before)
	}
	// A ratio that falls (less compressible data) raises the limit slowly.
	batch(a, 1000, 1000)
	if r := a.Ratio(); r < 6 {
		t.Fatalf("one uncompressed batch dropped the ratio to %.2f: the limit would overshoot", r)
	}
}

// Clients reserved before they join share the budget from the first one's
// join: the first client's part is already a third with three reserved.
func TestReservedClientsShareFromTheStart(t *testing.T) {
	b, err := New(256<<20, 10)
	if err != nil {
		t.Fatal(err)
	}
	b.Reserve(3)
	a := b.Join()
	if got, want := a.Part(), b.FetchBytes()/3; got != want {
		t.Fatalf("first of three reserved clients: part %d; want a third of %d = %d", got, b.FetchBytes(), want)
	}
	b.Join()
	c := b.Join()
	if got, want := a.Part(), b.FetchBytes()/3; got != want {
		t.Fatalf("all three joined: part %d; want %d", got, want)
	}
	// The reservation is used up: a leave gives the part back at once.
	c.Leave()
	if got, want := a.Part(), b.FetchBytes()/2; got != want {
		t.Fatalf("one of three left: part %d; want half, %d", got, want)
	}
	// Joining past the reservation counts as before.
	b.Join()
	b.Join()
	if got, want := a.Part(), b.FetchBytes()/4; got != want {
		t.Fatalf("four members: part %d; want a quarter, %d", got, want)
	}
}

// However small the budget, a fetch is never sized below the floor, nor
// above the configured limit when that is smaller.
func TestFetchLimitsFloor(t *testing.T) {
	b, err := New(MinLimit, 1)
	if err != nil {
		t.Fatal(err)
	}
	var fs []*Fetch
	for range 100 {
		f := b.Join()
		f.Configure(16<<20, 1<<20)
		fs = append(fs, f)
	}
	batch(fs[0], 100, 10000)
	if got, _ := fs[0].Limits(5, 0); got != minFetch {
		t.Fatalf("limit %d; want the floor %d", got, minFetch)
	}
	small := b.Join()
	small.Configure(4096, 4096)
	if got, part := small.Limits(1, 0); got != 4096 || part != 4096 {
		t.Fatalf("limits %d, %d; want the configured 4096", got, part)
	}
}

// A partition's fetch is held to about twice the records it may hold,
// at the compressed size per record observed, with or without a budget.
func TestPartitionLimitFollowsTheRecordsAPartitionMayHold(t *testing.T) {
	f := Unbudgeted()
	f.Configure(16<<20, 1<<20)
	if got, part := f.Limits(1, 128); got != 16<<20 || part != 2*initialPerRecord*128 {
		t.Fatalf("before any batch: limits %d, %d; want the configured fetch limit and %d per partition", got, part, 2*initialPerRecord*128)
	}
	f.OnFetchBatchRead(kgo.BrokerMetadata{}, "t", 0, kgo.FetchBatchMetrics{NumRecords: 100, CompressedBytes: 60_000, UncompressedBytes: 470_000})
	if _, part := f.Limits(1, 500); part != 2*600*500 {
		t.Fatalf("partition limit %d for 500 records of 600 bytes; want %d", part, 2*600*500)
	}
	if _, part := f.Limits(1, 4000); part != 1<<20 {
		t.Fatalf("partition limit %d; want the configured %d", part, 1<<20)
	}
	// Tiny records: never below twice the largest batch seen (60,000).
	f.OnFetchBatchRead(kgo.BrokerMetadata{}, "t", 0, kgo.FetchBatchMetrics{NumRecords: 1000, CompressedBytes: 1000, UncompressedBytes: 8000})
	if _, part := f.Limits(1, 10); part != 2*60000 {
		t.Fatalf("partition limit %d for a few tiny records after a 60 KB batch; want twice that, %d", part, 2*60000)
	}
	g := Unbudgeted()
	g.Configure(16<<20, 1<<20)
	g.OnFetchBatchRead(kgo.BrokerMetadata{}, "t", 0, kgo.FetchBatchMetrics{NumRecords: 100, CompressedBytes: 1000, UncompressedBytes: 8000})
	if _, part := g.Limits(1, 10); part != minPartitionFetch {
		t.Fatalf("partition limit %d for a few tiny records in small batches; want the floor %d", part, minPartitionFetch)
	}
	f.Leave() // outside any budget: nothing to leave
}
