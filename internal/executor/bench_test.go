package executor

// Benchmarks of the keyed executor against honest baselines living here:
//
//   - goroutine-per-key: a goroutine and a channel per key, created on the
//     key's first message and kept (the friendliest variant of that model:
//     no teardown cost), found through a sync.Map.
//   - hash-groups: the older model, 64×GOMAXPROCS serial groups (a goroutine
//     and a channel each) chosen by a hash of the key.
//   - unordered: a plain pool of GOMAXPROCS goroutines on one channel, with no
//     per-key order at all (the upper bound for a per-message handoff).
//
// See docs/benchmarks.md for the method and results.

import (
	"context"
	"fmt"
	"hash/maphash"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func closeWithin(e *Executor, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := e.Close(ctx); err != nil {
		panic(err)
	}
}

// dispatcher is what the benchmarks drive.
type dispatcher interface {
	// submit hands fn to the dispatcher for key; fn runs on the key's lane.
	submit(key string, fn *benchTask)
	// completed returns how many tasks have run.
	completed() uint64
	stop()
}

// benchTask is one message. run must be cheap for the no-op benchmarks.
type benchTask struct {
	run func() // nil: no-op
}

func (t *benchTask) Run(Resume) Status {
	if t.run != nil {
		t.run()
	}
	return Done
}

// counter is a padded per-goroutine completion counter.
type counter struct {
	n atomic.Uint64
	_ [56]byte
}

// keyed adapts the executor.
type keyed struct {
	e *Executor
	g *Group
}

func newKeyed(workers int) *keyed {
	e := New(Options{Workers: workers})
	return &keyed{e: e, g: e.Group(false)}
}

func (k *keyed) submit(key string, t *benchTask) {
	if err := k.g.Submit(key, t); err != nil {
		panic(err)
	}
}
func (k *keyed) completed() uint64 { return finished(k.e) }
func (k *keyed) wakeups() uint64   { return k.e.Stats().Wakeups }
func (k *keyed) stop()             { closeWithin(k.e, 10*time.Second) }

// goroutinePerKey runs each key on a goroutine of its own.
type goroutinePerKey struct {
	lanes sync.Map // key -> *keyLane
	mu    sync.Mutex
	all   []*keyLane
	wg    sync.WaitGroup
}

type keyLane struct {
	ch chan *benchTask
	c  counter
}

// serve runs the lane's tasks in order until its channel closes.
func (l *keyLane) serve(wg *sync.WaitGroup) {
	defer wg.Done()
	for t := range l.ch {
		if t.run != nil {
			t.run()
		}
		l.c.n.Add(1)
	}
}

func (d *goroutinePerKey) submit(key string, t *benchTask) {
	v, ok := d.lanes.Load(key)
	if !ok {
		d.mu.Lock()
		if v, ok = d.lanes.Load(key); !ok {
			l := &keyLane{ch: make(chan *benchTask, 64)}
			d.all = append(d.all, l)
			d.wg.Add(1)
			go l.serve(&d.wg)
			d.lanes.Store(key, l)
			v = l
		}
		d.mu.Unlock()
	}
	v.(*keyLane).ch <- t
}

func (d *goroutinePerKey) completed() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	var n uint64
	for _, l := range d.all {
		n += l.c.n.Load()
	}
	return n
}

func (d *goroutinePerKey) stop() {
	d.mu.Lock()
	for _, l := range d.all {
		close(l.ch)
	}
	d.mu.Unlock()
	d.wg.Wait()
}

// hashGroups is the older model: a fixed set of serial groups by key hash.
type hashGroups struct {
	seed   maphash.Seed
	groups []*keyLane
	wg     sync.WaitGroup
}

func newHashGroups() *hashGroups {
	d := &hashGroups{seed: maphash.MakeSeed(), groups: make([]*keyLane, 64*runtime.GOMAXPROCS(0))}
	for i := range d.groups {
		l := &keyLane{ch: make(chan *benchTask, 256)}
		d.groups[i] = l
		d.wg.Add(1)
		go l.serve(&d.wg)
	}
	return d
}

func (d *hashGroups) submit(key string, t *benchTask) {
	d.groups[maphash.String(d.seed, key)%uint64(len(d.groups))].ch <- t
}

func (d *hashGroups) completed() uint64 {
	var n uint64
	for _, l := range d.groups {
		n += l.c.n.Load()
	}
	return n
}

func (d *hashGroups) stop() {
	for _, l := range d.groups {
		close(l.ch)
	}
	d.wg.Wait()
}

// unordered is a plain pool with no per-key order.
type unordered struct {
	ch chan *benchTask
	cs []counter
	wg sync.WaitGroup
}

func newUnordered() *unordered {
	n := runtime.GOMAXPROCS(0)
	d := &unordered{ch: make(chan *benchTask, 1024), cs: make([]counter, n)}
	for i := range n {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			for t := range d.ch {
				if t.run != nil {
					t.run()
				}
				d.cs[i].n.Add(1)
			}
		}()
	}
	return d
}

func (d *unordered) submit(_ string, t *benchTask) { d.ch <- t }
func (d *unordered) completed() uint64 {
	var n uint64
	for i := range d.cs {
		n += d.cs[i].n.Load()
	}
	return n
}
func (d *unordered) stop() { close(d.ch); d.wg.Wait() }

// keyedBatch submits through SubmitBatch, as the receiver does with each
// partition's polled records.
type keyedBatch struct{ *keyed }

func (k keyedBatch) submitBatch(keys []string, ts []Task) {
	if _, err := k.g.SubmitBatch(keys, ts); err != nil {
		panic(err)
	}
}

var impls = []struct {
	name string
	new  func() dispatcher
}{
	{"keyed", func() dispatcher { return newKeyed(0) }},
	{"keyed-batch", func() dispatcher { return keyedBatch{newKeyed(0)} }},
	{"goroutine-per-key", func() dispatcher { return &goroutinePerKey{} }},
	{"hash-groups", func() dispatcher { return newHashGroups() }},
	{"unordered", func() dispatcher { return newUnordered() }},
}

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "aggregate-" + strconv.Itoa(i)
	}
	return keys
}

// BenchmarkDispatch: 10,000 keys, a no-op synchronous handler, two
// submitters. churn: consecutive messages go to different keys; deep: runs
// of 64 messages per key; unique (not among the issue's fixed patterns): a
// new key for every message, so no idle mailbox is ever found again.
func BenchmarkDispatch(b *testing.B) {
	const (
		submitters = 2
		window     = 8192
	)
	keys := benchKeys(10_000)
	for _, impl := range impls {
		for _, pattern := range []string{"churn", "deep", "unique"} {
			if pattern == "unique" && impl.name == "goroutine-per-key" {
				continue // it keeps a goroutine per key: a million of them
			}
			b.Run("impl="+impl.name+"/pattern="+pattern, func(b *testing.B) {
				d := impl.new()
				defer d.stop()
				noop := &benchTask{}
				// Warm up: pools, goroutines and tables reach their steady
				// state before the clock starts.
				for i := range 100_000 {
					d.submit(keys[(i/64)%len(keys)], noop)
				}
				for d.completed() < 100_000 {
					time.Sleep(100 * time.Microsecond)
				}
				warm := d.completed()
				var fresh []string // unique: a key never seen before for every message
				if pattern == "unique" {
					fresh = make([]string, b.N+submitters)
					for i := range fresh {
						fresh[i] = "new-" + strconv.Itoa(i)
					}
				}
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				var wakesBefore uint64
				if k, ok := d.(interface{ wakeups() uint64 }); ok {
					wakesBefore = k.wakeups()
				}
				b.ReportAllocs()
				b.ResetTimer()
				var wg sync.WaitGroup
				for s := range submitters {
					wg.Add(1)
					go func() {
						defer wg.Done()
						n := b.N / submitters
						if s == 0 {
							n += b.N % submitters
						}
						bd, batching := d.(interface{ submitBatch([]string, []Task) })
						var bkeys []string
						var btasks []Task
						for i := range n {
							// A receiver's window bounds what is in flight;
							// so does this one, for every implementation.
							if i%256 == 0 {
								for warm+uint64(i*submitters) > d.completed()+window {
									time.Sleep(20 * time.Microsecond) // park, as a receiver waiting for room does
								}
							}
							var key string
							switch pattern {
							case "churn":
								key = keys[(i*submitters+s)%len(keys)]
							case "deep":
								key = keys[((i/64)*submitters+s)%len(keys)]
							default:
								key = fresh[i*submitters+s]
							}
							if !batching {
								d.submit(key, noop)
								continue
							}
							bkeys, btasks = append(bkeys, key), append(btasks, noop)
							if len(bkeys) == 64 || i == n-1 {
								bd.submitBatch(bkeys, btasks)
								bkeys, btasks = bkeys[:0], btasks[:0]
							}
						}
					}()
				}
				wg.Wait()
				for d.completed() < warm+uint64(b.N) {
					runtime.Gosched()
				}
				b.StopTimer()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N), "allocs/msg")
				if k, ok := d.(interface{ wakeups() uint64 }); ok {
					b.ReportMetric(float64(k.wakeups()-wakesBefore)/float64(b.N), "wakes/msg")
				}
			})
		}
	}
}

// BenchmarkHeadOfLine: two workers, open-loop arrivals at 20,000 messages/s;
// one key (1% of the traffic) blocks its worker synchronously for 2 ms per
// message. Reports submit-to-start latency percentiles of the other keys,
// measured from the intended arrival time.
func BenchmarkHeadOfLine(b *testing.B) {
	const (
		interval = 50 * time.Microsecond
		slowEach = 100
		slowFor  = 2 * time.Millisecond
	)
	keys := benchKeys(1_000)
	hol := []struct {
		name string
		new  func() dispatcher
	}{
		{"keyed", func() dispatcher { return newKeyed(2) }},
		{"hash-groups", func() dispatcher { return newHashGroups() }},
		{"goroutine-per-key", func() dispatcher { return &goroutinePerKey{} }},
	}
	for _, impl := range hol {
		b.Run("impl="+impl.name, func(b *testing.B) {
			d := impl.new()
			defer d.stop()
			lat := make([]int64, b.N)
			tasks := make([]benchTask, b.N)
			start := time.Now()
			intended := make([]int64, b.N)
			for i := range tasks {
				intended[i] = int64(time.Duration(i) * interval)
				if i%slowEach == 0 {
					tasks[i].run = func() { lat[i] = -1; time.Sleep(slowFor) }
				} else {
					tasks[i].run = func() { lat[i] = int64(time.Since(start)) - intended[i] }
				}
			}
			runtime.GC()
			b.ResetTimer()
			start = time.Now()
			for i := range tasks {
				for time.Since(start) < time.Duration(intended[i]) {
					runtime.Gosched()
				}
				key := keys[i%len(keys)]
				if i%slowEach == 0 {
					key = "slow"
				}
				d.submit(key, &tasks[i])
			}
			for d.completed() < uint64(b.N) {
				runtime.Gosched()
			}
			b.StopTimer()
			fast := slices.DeleteFunc(lat, func(v int64) bool { return v < 0 })
			slices.Sort(fast)
			if len(fast) > 0 {
				b.ReportMetric(float64(fast[len(fast)*99/100])/1e3, "p99-fast-us")
				b.ReportMetric(float64(fast[len(fast)*999/1000])/1e3, "p999-fast-us")
			}
		})
	}
}

// BenchmarkSlowHandlers: handlers complete asynchronously after 5 ms; 256
// keys always have a message outstanding. littles-ratio is the achieved
// throughput over the Little's-law bound 256 / 5 ms.
func BenchmarkSlowHandlers(b *testing.B) {
	const (
		keys    = 256
		latency = 5 * time.Millisecond
	)
	e := New(Options{})
	defer closeWithin(e, 10*time.Second)
	g := e.Group(false)
	names := benchKeys(keys)
	var remaining atomic.Int64
	done := make(chan struct{})
	type slow struct {
		key  string
		task fn
	}
	loops := make([]*slow, keys)
	for i := range loops {
		s := &slow{key: names[i]}
		s.task = func(r Resume) Status {
			time.AfterFunc(latency, func() {
				switch n := remaining.Add(-1); {
				case n >= keys: // more to send: keep this key busy
					if err := g.Submit(s.key, s.task); err != nil {
						panic(err)
					}
				case n == 0:
					close(done)
				}
				r.Complete(false)
			})
			return Pending
		}
		loops[i] = s
	}
	b.ResetTimer()
	n := max(b.N, keys)
	remaining.Store(int64(n))
	begin := time.Now()
	for _, s := range loops {
		if err := g.Submit(s.key, s.task); err != nil {
			b.Fatal(err)
		}
	}
	<-done
	elapsed := time.Since(begin)
	b.StopTimer()
	bound := float64(keys) / latency.Seconds()
	b.ReportMetric(float64(n)/elapsed.Seconds()/bound, "littles-ratio")
}

func ExampleGroup_Submit() {
	e := New(Options{Workers: 2})
	defer closeWithin(e, time.Second)
	g := e.Group(false)
	var wg sync.WaitGroup
	wg.Add(3)
	for i := range 3 {
		_ = g.Submit("cart-1", fn(func(Resume) Status {
			fmt.Println("message", i) // one at a time, in order
			wg.Done()
			return Done
		}))
	}
	wg.Wait()
	// Output:
	// message 0
	// message 1
	// message 2
}

// finished returns the number of tasks that completed, successfully or not,
// without taking a lock: the benchmarks poll it.
func finished(e *Executor) uint64 {
	var n uint64
	for _, w := range e.workers {
		n += w.succeeded.Load() + w.failed.Load()
	}
	for i := range e.shards {
		sh := &e.shards[i]
		n += sh.asyncCompleted.Load() + sh.asyncFailed.Load()
	}
	return n
}
