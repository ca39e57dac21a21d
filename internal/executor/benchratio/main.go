// Command benchratio reads `go test -bench` output of internal/executor (and
// of internal/receiver's BenchmarkConsume, when present) and prints the
// ratios the executor is judged by, each the median over rounds
// of a ratio taken within one round (the i-th run of each benchmark), with
// the spread. Absolute times vary with the machine; ratios inside one run
// much less.
//
//	go test -run '^$' -bench . -count 5 ./internal/executor | go run ./internal/executor/benchratio
package main

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// line: BenchmarkDispatch/impl=keyed/pattern=churn-2  1000000  123 ns/op  0.01 allocs/msg ...
var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

func main() {
	runs := map[string][]map[string]float64{} // name -> rounds -> unit -> value
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		vals := map[string]float64{}
		f := strings.Fields(m[2])
		for i := 0; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				vals[f[i+1]] = v
			}
		}
		runs[m[1]] = append(runs[m[1]], vals)
	}
	d := func(impl, pattern string) string {
		return "BenchmarkDispatch/impl=" + impl + "/pattern=" + pattern
	}
	h := func(impl string) string { return "BenchmarkHeadOfLine/impl=" + impl }
	rows := []ratioRow{
		{"churn: keyed / unordered", d("keyed", "churn"), d("unordered", "churn"), "ns/op", "<= 2.5", 2.5, true},
		{"churn: keyed / goroutine-per-key", d("keyed", "churn"), d("goroutine-per-key", "churn"), "ns/op", "<= 0.6", 0.6, true},
		{"deep: keyed / hash-groups", d("keyed", "deep"), d("hash-groups", "deep"), "ns/op", "<= 1.25", 1.25, true},
		{"deep: keyed / goroutine-per-key", d("keyed", "deep"), d("goroutine-per-key", "deep"), "ns/op", "(context)", 0, true},
		{"churn: keyed-batch / unordered", d("keyed-batch", "churn"), d("unordered", "churn"), "ns/op", "(receiver's path)", 0, true},
		{"churn: keyed-batch / goroutine-per-key", d("keyed-batch", "churn"), d("goroutine-per-key", "churn"), "ns/op", "(receiver's path)", 0, true},
		{"deep: keyed-batch / hash-groups", d("keyed-batch", "deep"), d("hash-groups", "deep"), "ns/op", "(receiver's path)", 0, true},
		{"unique: keyed / unordered", d("keyed", "unique"), d("unordered", "unique"), "ns/op", "(new key each message)", 0, true},
		{"unique: keyed / hash-groups", d("keyed", "unique"), d("hash-groups", "unique"), "ns/op", "(new key each message)", 0, true},
		{"head-of-line p999-fast: keyed / hash-groups", h("keyed"), h("hash-groups"), "p999-fast-us", "<= 1", 1, true},
	}
	// End to end, when internal/receiver's BenchmarkConsume ran: records per
	// second through the receiver relative to a plain franz-go consumer.
	c := func(impl string) string { return "BenchmarkConsume/impl=" + impl }
	if len(runs[c("raw-franz-go")]) > 0 {
		rows = append(rows,
			ratioRow{"e2e: format raw speed / raw franz-go", c("raw-franz-go"), c("receiver/format=raw"), "ns/rec", ">= 0.8", 0.8, false},
			ratioRow{"e2e: format wow speed / raw franz-go", c("raw-franz-go"), c("receiver/format=wow"), "ns/rec", ">= 0.6", 0.6, false},
		)
	}
	// The http sink, when internal/handlers' BenchmarkHTTPSink ran: messages
	// per second relative to a per-partition sequential pusher and to
	// net/http alone, against a 5 ms endpoint (`make bench-http`).
	hs := func(impl string) string { return "BenchmarkHTTPSink/impl=" + impl }
	if len(runs[hs("sequential-per-partition")]) > 0 {
		rows = append(rows,
			ratioRow{"http: sink/defaults speed / sequential", hs("sequential-per-partition"), hs("sink/defaults"), "ns/op", ">= 10", 10, false},
			ratioRow{"http: sink/max-concurrency=64 speed / seq.", hs("sequential-per-partition"), hs("sink/max-concurrency=64"), "ns/op", "(former default)", 0, false},
			ratioRow{"http: sink/h2c speed / sequential", hs("sequential-per-partition"), hs("sink/h2c"), "ns/op", "(opt-in)", 0, false},
			ratioRow{"http: sink/defaults speed / net/http alone", hs("ceiling/net-http"), hs("sink/defaults"), "ns/op", "(same concurrency)", 0, false},
		)
	}
	// Batched delivery, when BenchmarkHTTPSinkBatch ran: batches of 100
	// against one message per request, at the same max-concurrency.
	hb := func(impl string) string { return "BenchmarkHTTPSinkBatch/impl=" + impl }
	for _, mc := range []string{"8", "64"} {
		if len(runs[hb("unbatched/max-concurrency="+mc)]) > 0 {
			rows = append(rows, ratioRow{"http: batch=100 / unbatched, max-conc. " + mc,
				hb("unbatched/max-concurrency=" + mc), hb("batch=100/max-concurrency=" + mc), "ns/op", ">= 5", 5, false})
		}
	}
	fmt.Printf("%-46s %10s %10s %10s  %s\n", "ratio (median of rounds)", "median", "min", "max", "target")
	for _, r := range rows {
		ratios := pair(runs[r.a], runs[r.b], r.unit)
		if len(runs[r.a])+len(runs[r.b]) == 0 {
			continue // not run
		}
		report(r.what, ratios, r.target, r.limit, r.atMost)
	}
	single := []struct {
		what, name, unit, target string
		limit                    float64
		atMost                   bool
	}{
		{"churn: keyed allocs/msg", d("keyed", "churn"), "allocs/msg", "<= 0.05", 0.05, true},
		{"deep: keyed allocs/msg", d("keyed", "deep"), "allocs/msg", "<= 0.05", 0.05, true},
		{"unique: keyed allocs/msg", d("keyed", "unique"), "allocs/msg", "(new key each message)", 0, true},
		{"churn: keyed wakes/msg", d("keyed", "churn"), "wakes/msg", "(budget <= 0.01)", 0, true},
		{"deep: keyed wakes/msg", d("keyed", "deep"), "wakes/msg", "(budget <= 0.01)", 0, true},
		{"head-of-line: keyed p99-fast-us", h("keyed"), "p99-fast-us", "<= 1000", 1000, true},
		{"slow handlers: littles-ratio", "BenchmarkSlowHandlers", "littles-ratio", ">= 0.8", 0.8, false},
		{"http: sink/defaults littles-ratio", hs("sink/defaults"), "littles-ratio", ">= 0.8", 0.8, false},
		{"http: no-http ceiling littles-ratio", hs("ceiling/no-http"), "littles-ratio", "(the method's own)", 0, false},
		{"http: sink/defaults cpu-us/msg", hs("sink/defaults"), "cpu-us/msg", "(server included)", 0, true},
		{"http: sink/defaults conns opened", hs("sink/defaults"), "conns", "(0: all reused)", 0, true},
	}
	for _, s := range single {
		var vs []float64
		for _, run := range runs[s.name] {
			if v, ok := run[s.unit]; ok {
				vs = append(vs, v)
			}
		}
		if len(runs[s.name]) == 0 {
			continue // not run
		}
		report(s.what, vs, s.target, s.limit, s.atMost)
	}
}

// ratioRow is a ratio of a unit between two benchmarks: a / b, judged
// against limit (none if 0), at most or at least.
type ratioRow struct {
	what, a, b, unit, target string
	limit                    float64
	atMost                   bool
}

func pair(a, b []map[string]float64, unit string) []float64 {
	var out []float64
	for i := range min(len(a), len(b)) {
		x, ok1 := a[i][unit]
		y, ok2 := b[i][unit]
		if ok1 && ok2 && y != 0 {
			out = append(out, x/y)
		}
	}
	return out
}

func report(what string, vs []float64, target string, limit float64, atMost bool) {
	if len(vs) == 0 {
		fmt.Printf("%-46s %10s\n", what, "no data")
		return
	}
	slices.Sort(vs)
	med := vs[len(vs)/2]
	if len(vs)%2 == 0 {
		med = (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
	}
	verdict := ""
	if limit != 0 {
		if (atMost && med <= limit) || (!atMost && med >= limit) {
			verdict = "met"
		} else {
			verdict = "MISSED"
		}
	}
	fmt.Printf("%-46s %10.3g %10.3g %10.3g  %s %s\n", what, med, vs[0], vs[len(vs)-1], target, verdict)
}
