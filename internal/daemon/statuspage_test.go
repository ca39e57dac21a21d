package daemon

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/wowd/wowd/internal/testwait"
)

// browser returns the path of a Chromium to drive. Without one the test
// is skipped, except where a browser is required (WOWD_REQUIRE_BROWSER=1,
// as .ci/run sets, or CI=true): there it fails.
func browser(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("WOWD_REQUIRE_BROWSER") == "1" || os.Getenv("CI") == "true" {
		t.Fatal("no Chromium found (apt-get install chromium); the status page must be tested in a browser here")
	}
	t.Skip("no Chromium found (apt-get install chromium): the status page is not tested in a browser")
	return ""
}

// artifactDir is where the test leaves its screenshot: $WOWD_ARTIFACTS_DIR
// when set, else a temporary directory.
func artifactDir(t *testing.T) string {
	if d := os.Getenv("WOWD_ARTIFACTS_DIR"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// TestStatusPageInBrowser loads the status page of a running daemon in
// headless Chromium: the receiver's partitions appear, an aggregate held by
// a slow sink shows up as hot once the page's own script has refreshed it,
// one whose message the sink refused for good shows up as parked, and its
// redrive button unparks it. It leaves a screenshot (status-page.png; docs/ has a copy
// made by running this test with WOWD_ARTIFACTS_DIR=docs).
func TestStatusPageInBrowser(t *testing.T) {
	path := browser(t)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, cartTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close) // after the daemon stopped
	sink := newSlowSink(t, "hot-cart")
	rt := startWithAdmin(t, c, sink.URL)
	testwait.For(t, 20*time.Second, "the receiver joined", func() bool { ok, _ := rt.Ready(); return ok })

	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // root in CI containers
		chromedp.WindowSize(1100, 900),
	)...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(alloc)
	defer cancel()
	ctx, cancelRun := context.WithTimeout(ctx, 30*time.Second)
	defer cancelRun()

	page := "http://" + rt.AdminAddr() + "/admin/"
	if err := chromedp.Do(ctx,
		chromedp.Navigate(page),
		chromedp.WaitVisible(chromedp.CSS(`#receivers tr.partition`)),
	); err != nil {
		t.Fatalf("loading the page: %v", err)
	}
	partitions, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#receivers tr.partition").length`))
	if err != nil {
		t.Fatal(err)
	}
	if partitions != 3 {
		t.Errorf("%d partition rows, want 3", partitions)
	}

	// Only now the traffic: the page shows it by refreshing itself. The
	// sink refuses bad-cart's message for good: it parks.
	sink.fail("bad-cart")
	produceCarts(t, c, "hot-cart", 30, 40)
	produceCarts(t, c, "bad-cart", 1, 0)
	if err := chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.CSS(`#hot tr.aggregate[data-id="hot-cart"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#oldest tr.aggregate[data-id="hot-cart"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#parked tr.parked[data-id="bad-cart"]`)),
	); err != nil {
		t.Fatalf("waiting for the held aggregate to show as hot: %v", err)
	}
	// The count grows as the records are fetched: wait for all of them.
	unfinished, err := chromedp.Run(ctx, chromedp.Poll[string](
		`(() => { const c = document.querySelector('#hot tr.aggregate[data-id="hot-cart"] td.num'); return c && c.textContent === "30" ? c.textContent : null; })()`))
	if err != nil {
		t.Fatalf("hot-cart never shown with 30 unfinished messages: %v", err)
	}
	if unfinished != "30" {
		t.Errorf("hot-cart shown with %q unfinished messages, want 30", unfinished)
	}

	// Readable on a phone: nothing wider than the screen but the tables,
	// which scroll in their own boxes.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844)); err != nil {
		t.Fatal(err)
	}
	overflow, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth + 1`))
	if err != nil {
		t.Fatal(err)
	}
	if overflow {
		t.Error("on a 390px wide screen the page is wider than the screen")
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1100, 900)); err != nil {
		t.Fatal(err)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(artifactDir(t), "status-page.png")
	if err := os.WriteFile(file, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", file)

	// The sink takes bad-cart's messages now: its redrive button unparks
	// it, and the message reaches the sink.
	sink.fail("")
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#parked tr.parked[data-id="bad-cart"] button[data-action="redrive"]`)),
		chromedp.Query(chromedp.CSS(`#parked tr.parked[data-id="bad-cart"]`), chromedp.NodeNotPresent),
	); err != nil {
		t.Fatalf("redriving bad-cart from its button: %v", err)
	}
	testwait.For(t, 10*time.Second, "bad-cart's message handled", func() bool { return sink.handledOf("bad-cart") == 1 })
	sink.letGo()
}
