package receiver

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/testwait"
)

// TestIngestLoadLeavesThePollLoopItsRoom: under a steady load of ingest
// admissions (more callers waiting in Admit than the window has slots),
// records in Kafka are still fetched and handled. Each admission took a
// slot the moment a record freed one, so the window never had the
// sixteenth free the poll loop waits for: nothing was fetched while the
// load lasted (0 of 20 records in 30 s, 73,631 local records handled),
// nothing was committed, and the copies the ingest gave up to Kafka were
// never handled. The local records keep going meanwhile.
func TestIngestLoadLeavesThePollLoopItsRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window = 32 // batch 2
		h := newVirtualHarness(t, 1)
		var fetched, jitter atomic.Int64
		hd := handlerFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
			if m.Partition >= 0 {
				fetched.Add(1)
				ack.Done(nil)
				return
			}
			d := 10*time.Millisecond + time.Duration(jitter.Add(1)%997)*7*time.Microsecond // completions spread out, as real ones are
			time.AfterFunc(d, func() { ack.Done(nil) })
		})
		r := h.receiver("g-ingest-load", hd, window)
		testwait.For(t, 10*time.Second, "assigned, the start barrier gone", func() bool {
			_, all := r.holds.count()
			return r.Ready() && len(r.active()) == 1 && !all
		})
		var local atomic.Int64
		stopLoad := ingestLoad(r, 40, &local)
		time.Sleep(time.Second)
		before := local.Load()
		produce(t, h.c, testTopic, 20, 20)
		time.Sleep(30 * time.Second)
		got, during := fetched.Load(), local.Load()-before
		stopLoad()
		if got != 20 {
			t.Errorf("records fetched and handled within 30 s of ingest load: %d of 20", got)
		}
		if during < 1000 {
			t.Errorf("local records handled in those 30 s: %d, want the ingest to keep going too", during)
		}
		stop(t, r)
	})
}

// TestWithoutIngestNothingWatchesHolds: a receiver of a daemon without the
// ingest never admits a local record, so it has no start barrier and
// nothing to watch. Its watcher asked the coordinator for the group's
// offsets every 200 ms for as long as a partition stayed quiet below its
// end at start (a new group starting at the end: 2,999 requests in 10
// minutes), and reported every ingested message held (ingest_held_all 1).
func TestWithoutIngestNothingWatchesHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newVirtualHarness(t, 1)
		produce(t, h.c, testTopic, 5, 5)
		var fetches atomic.Int64
		h.c.ControlKey(int16(kmsg.OffsetFetch), func(kmsg.Request) (kmsg.Response, error, bool) {
			h.c.KeepControl()
			fetches.Add(1)
			return nil, nil, false
		})
		r := h.receiver("g-no-ingest", handler.Sync(func(context.Context, *handler.Message) error { return nil }), 16, func(o *Options) {
			o.Ingest = false
			o.ClientOpts = append(o.ClientOpts,
				kgo.ConsumeStartOffset(kgo.NewOffset().AtEnd()),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
		})
		testwait.For(t, 30*time.Second, "ready", r.Ready)
		before := fetches.Load()
		time.Sleep(10 * time.Minute)
		n := fetches.Load() - before
		if _, all := r.holds.count(); n > 10 || all {
			t.Errorf("without ingest: %d OffsetFetch requests in 10 minutes (want at most the group's own), ingest_held_all %v", n, all)
		}
		if _, err := r.Admit(context.Background(), &kgo.Record{Topic: testTopic, Key: []byte("a")}); err == nil {
			t.Error("a receiver without ingest admitted a local record")
		}
		stop(t, r)
	})
}

// TestIngestAndABacklogShareTheWindow: with a backlog in Kafka and a
// steady load of ingest admissions, both get through, about half each:
// while the poll loop waits for room its records, admissions take only
// the slots it grants them, up to half of what it takes. Before, each got
// in by winning races: 355 fetched and 2,862 ingested records in 10 s with
// admissions leaving the poll loop only the last sixteenth, 3,008 and 182
// with them waiting for grants the poll loop kept taking back.
func TestIngestAndABacklogShareTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window = 32 // batch 2
		h := newVirtualHarness(t, 1)
		var fetched, local atomic.Int64
		hd := handlerFunc(func(_ context.Context, m *handler.Message, ack handler.Ack) {
			n := &local
			if m.Partition >= 0 {
				n = &fetched
			}
			time.AfterFunc(100*time.Millisecond, func() { n.Add(1); ack.Done(nil) })
		})
		r := h.receiver("g-ingest-backlog", hd, window)
		testwait.For(t, 10*time.Second, "assigned, the start barrier gone", func() bool {
			_, all := r.holds.count()
			return r.Ready() && len(r.active()) == 1 && !all
		})
		produce(t, h.c, testTopic, 5000, 500)
		testwait.For(t, 10*time.Second, "the backlog flowing", func() bool { return fetched.Load() > 0 })
		stopLoad := ingestLoad(r, 40, new(atomic.Int64))
		f0, l0 := fetched.Load(), local.Load()
		time.Sleep(10 * time.Second)
		f, l := fetched.Load()-f0, local.Load()-l0
		stopLoad()
		t.Logf("fetched %d, ingested %d", f, l)
		// The window holds 32 for 100 ms each: about 3,200 in 10 s.
		if f < 1000 || l < 1000 {
			t.Errorf("in 10 s of a backlog beside ingest load: %d fetched and %d ingested records handled; want each at least 1,000 of about 3,200", f, l)
		}
		stop(t, r)
	})
}

// ingestLoad starts n callers that each admit a record of a new aggregate
// to r, wait until it is handled, report it not published (given up to
// Kafka as far as the holds know) and go again, counting each in done. The
// function returned stops them and waits for them.
func ingestLoad(r *Receiver, n int, done *atomic.Int64) (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	for g := range n {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-quit:
					return
				default:
				}
				a, err := r.Admit(context.Background(), &kgo.Record{Topic: testTopic, Partition: -1, Offset: -1,
					Key: []byte("l-" + strconv.Itoa(g) + "-" + strconv.Itoa(i)), Value: []byte("x")})
				if err != nil {
					return
				}
				<-a.Done()
				a.NotPublished()
				done.Add(1)
			}
		})
	}
	return func() {
		close(quit)
		wg.Wait()
	}
}
