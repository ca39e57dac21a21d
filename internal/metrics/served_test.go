package metrics

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The handler duration runs "from a message's start on a worker to its
// handler's acknowledgement, retries included", and one try alone may last
// handler.timeout (default 1m); retries held while a sink is down add
// minutes more. The largest finite bucket was 30s: a message acknowledged
// after 45s and one after ten minutes fell into the same +Inf bucket, and
// histogram_quantile (the dashboard's p50/p90/p99) reported 30s for both.
// Found by review.
func TestHandlerDurationBucketsCoverATry(t *testing.T) {
	m := New("test")
	r := m.Receiver("d", "c", "h", nil)
	r.HandlerDuration(45 * time.Second)
	r.HandlerDuration(10 * time.Minute)
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != Namespace+"_handler_duration_seconds" {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		bs := h.GetBucket()
		last := bs[len(bs)-1] // the largest finite bound (+Inf is implicit)
		if last.GetUpperBound() < time.Minute.Seconds() {
			t.Errorf("largest finite bucket of %s is %vs, below one try of the default handler.timeout (60s): a 45s acknowledgement is in +Inf with a 10m one (%d of %d observations in a finite bucket)",
				mf.GetName(), last.GetUpperBound(), last.GetCumulativeCount(), h.GetSampleCount())
		}
		return
	}
	t.Fatal("no wowd_handler_duration_seconds gathered")
}

// Every family /metrics serves is in docs/metrics.md:
// promhttp_metric_handler_errors_total (the handler registers it on the
// same registry) was served to every scrape and documented nowhere. Found
// by review.
func TestServedFamiliesAreDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := New("test")
	srv, err := NewServer("127.0.0.1:0", m, func() (bool, string) { return true, "" })
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	defer func() {
		if _, err := srv.Shutdown(t.Context()); err != nil {
			t.Error(err)
		}
	}()
	resp, err := http.Get("http://" + srv.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	for name := range mfs {
		switch {
		case strings.HasPrefix(name, "go_"), strings.HasPrefix(name, "process_"):
		default:
			if !strings.Contains(string(doc), "`"+name+"`") {
				t.Errorf("%s is served but not in docs/metrics.md", name)
			}
		}
	}
}
