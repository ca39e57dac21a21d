package realkafka

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/wowd/wowd/internal/testwait"
)

// TestIngest: two wowd processes with the local-first ingest, on a topic
// whose max.message.bytes is 2,000,000. Through one of them:
//   - an aggregate's messages #0..#2: the endpoint rejects #0 (422, a
//     permanent failure) when it is handled locally, so the
//     receiver gives it up and its copy is handled from Kafka by the owner
//     of its partition; #1 and #2, sent at once after each answer, wait for
//     it (they are given up too while #0's copy is not committed), so the
//     endpoint sees their first successes in order; once all is committed,
//     #3 is handled locally again (no position headers: it has none yet);
//   - a message of 1.5 MB, over the Kafka client's default batch limit but
//     within the topic's, is accepted, handled and published; one of
//     2.5 MB is refused with 413 before it is handled anywhere.
func TestIngest(t *testing.T) {
	e := newEnv(t, "ingest")
	topic := e.topic("shop", "cart")
	e.createTopic(topic, 2)
	limit := "2000000"
	rs, err := e.adm.AlterTopicConfigs(e.ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: &limit}}, topic)
	if err == nil {
		_, err = rs.On(topic, nil)
	}
	if err != nil {
		t.Fatal(err)
	}

	type seen struct {
		seq   int64
		local bool // no kafka-offset header: handled before its copy was published
		size  int
	}
	var (
		mu       sync.Mutex
		ok       []seen // first successes and later ones, in order
		rejected bool
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var v struct {
			AggregateID string `json:"aggregateId"`
			Seq         int64  `json:"seq"`
		}
		_ = json.Unmarshal(body, &v)
		mu.Lock()
		defer mu.Unlock()
		local := r.Header.Get("kafka-offset") == ""
		if v.AggregateID == "cart-1" && v.Seq == 0 && local && !rejected {
			rejected = true
			w.WriteHeader(http.StatusUnprocessableEntity)
			return
		}
		ok = append(ok, seen{v.Seq, local, len(body)})
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	successes := func() []seen { mu.Lock(); defer mu.Unlock(); return slices.Clone(ok) }
	seqs := func() (out []int64) {
		for _, s := range successes() {
			out = append(out, s.seq)
		}
		return out
	}

	cfg := e.config("shop", []string{"cart"}, srv.URL)
	cfg.OnFailure = "park"
	cfg.Ingest = true
	c := newCluster(e, cfg)
	ps := c.startN(2)
	post := func(seq int64, pad int) int {
		t.Helper()
		body := wowEvent("shop", "cart", "cart-1", seq, strings.Repeat("x", pad))
		resp, err := http.Post("http://"+ps[1].metrics+"/v1/messages/event", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Logf("#%d (%d bytes): %d %s", seq, len(body), resp.StatusCode, answer)
		return resp.StatusCode
	}
	// Until the group has committed past the topic's ends at start (read
	// just after start), every ingested message goes through Kafka.
	heldAll := func() bool {
		m, err := scrape(ps[1].metrics)
		return err != nil || m["wowd_receiver_ingest_held_all"][`context="shop",dispatcher="sink"`] != 0
	}
	testwait.For(t, time.Minute, "the start barrier down", func() bool { return !heldAll() })
	for seq := range int64(3) {
		if code := post(seq, 0); code != http.StatusAccepted {
			t.Fatalf("#%d answered %d", seq, code)
		}
	}
	testwait.For(t, time.Minute, "#0..#2 handled", func() bool { return len(successes()) >= 3 })
	if got := seqs(); !slices.Equal(got, []int64{0, 1, 2}) {
		t.Fatalf("the endpoint's successes %v, want [0 1 2]", got)
	}
	for _, s := range successes() {
		if s.local {
			t.Errorf("#%d handled locally, ahead of (or instead of through) #0's copy", s.seq)
		}
	}
	e.waitCommittedAtEnd(e.group("shop"), e.endOffsets(topic), time.Minute)
	testwait.For(t, time.Minute, "no aggregate held", func() bool {
		m, err := scrape(ps[1].metrics)
		return err == nil && m["wowd_receiver_ingest_held_aggregates"][`context="shop",dispatcher="sink"`] == 0
	})
	if code := post(3, 0); code != http.StatusAccepted {
		t.Fatalf("#3 answered %d", code)
	}
	if got := successes(); len(got) != 4 || got[3].seq != 3 || !got[3].local {
		t.Fatalf("#3 when answered: successes %+v; want it handled locally", got)
	}

	if code := post(4, 1_500_000); code != http.StatusAccepted {
		t.Fatalf("a 1.5 MB message for a topic of 2 MB answered %d, want 202", code)
	}
	if code := post(5, 2_500_000); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a 2.5 MB message for a topic of 2 MB answered %d, want 413", code)
	}
	got := successes()
	if len(got) != 5 || got[4].seq != 4 || got[4].size < 1_500_000 {
		t.Fatalf("successes %d, the last %+v; want the 1.5 MB message handled, and not the 2.5 MB one", len(got), got[len(got)-1])
	}
	ends := e.endOffsets(topic)
	var n int64
	for _, o := range ends {
		n += o
	}
	if n != 5 {
		t.Fatalf("%d records in the topic, want the copies of #0..#4: %v", n, ends)
	}
	e.waitCommittedAtEnd(e.group("shop"), ends, time.Minute)
	c.stopAll()
	c.checkLogs()
}
