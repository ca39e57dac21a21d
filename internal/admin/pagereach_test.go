package admin

import (
	"context"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestTheRedirectToThePageNeedsNoToken: GET /admin (no slash) is
// redirected to the page /admin/, so that an operator who types the
// listener's URL gets the page, which asks for the token. With
// wow.admin.token-file set the guard answered it 401 (JSON) before the
// redirect ran: the page that would ask for the token was never reached.
func TestTheRedirectToThePageNeedsNoToken(t *testing.T) {
	s, _ := testServer(t, Options{Parked: &fakeParked{}})
	if w := do(s, "GET", "/admin", local); w.Code != http.StatusMovedPermanently || w.Header().Get("Location") != "/admin/" {
		t.Fatalf("without a token: GET /admin answered %d (Location %q); the test's premise is wrong", w.Code, w.Header().Get("Location"))
	}
	s, _ = testServer(t, Options{Parked: &fakeParked{}, Token: tokenFile(t)})
	if w := do(s, "GET", "/admin/", local); w.Code != http.StatusOK {
		t.Fatalf("with a token: GET /admin/ (the page) answered %d", w.Code)
	}
	w := do(s, "GET", "/admin", local)
	if w.Code != http.StatusMovedPermanently || w.Header().Get("Location") != "/admin/" {
		t.Errorf("with a token: GET /admin answered %d (Location %q), want 301 to /admin/ as without one: the browser gets\n%s", w.Code, w.Header().Get("Location"), w.Body)
	}
}

// refusingParked lists one parked aggregate, id, and refuses every action
// with ErrConflict.
type refusingParked struct{ id string }

func (p refusingParked) List(context.Context) ([]ParkedAggregate, error) {
	return []ParkedAggregate{{Dispatcher: "proj", Context: "shop", Aggregate: "cart", ID: p.id, Topic: "wow.shop.cart.event",
		Class: "permanent", Reason: "http 400", Attempts: 1, Since: time.Now().Add(-time.Minute), Owned: true}}, nil
}
func (refusingParked) Park(context.Context, string, string) error    { return ErrConflict }
func (refusingParked) Redrive(context.Context, string, string) error { return ErrConflict }
func (refusingParked) Skip(context.Context, string, string) error    { return ErrConflict }
func (refusingParked) Discard(context.Context, string, string) error { return ErrConflict }

// TestThePageKeepsTheFailureOfAnAction: on the status page, an action
// that fails is reported in #msg ("redrive proj/<id>: HTTP 409: ..."), and
// act() then refreshes the page. The refresh cleared #msg whenever its text
// matched /token|Refresh/ (meant for the page's own "type the token" and
// "Refresh failed" messages), so the failure of an action on an aggregate
// (or dispatcher) whose name holds "token" was wiped within milliseconds:
// the operator saw neither "requested" nor the failure. The same action
// on cart-9 keeps its message.
func TestThePageKeepsTheFailureOfAnAction(t *testing.T) {
	bctx := chromium(t)

	shown := func(id string) (final string, seen []string) {
		t.Helper()
		s, err := New("127.0.0.1:0", Options{Source: newFakeSource(), Parked: refusingParked{id}, SampleEvery: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		s.Start()
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, _ = s.Shutdown(ctx)
		}()
		ctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		button := `#parked tr.parked[data-id="` + id + `"] button[data-action="redrive"]`
		if err := chromedp.Do(ctx,
			chromedp.Navigate("http://"+s.Addr()+"/admin/"),
			chromedp.WaitVisible(chromedp.CSS(button)),
		); err != nil {
			t.Fatalf("loading the page: %v", err)
		}
		// Record every text #msg takes.
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { window.__msgs = []; const m = document.getElementById("msg");
			new MutationObserver(() => window.__msgs.push(m.textContent)).observe(m, {childList: true, characterData: true, subtree: true}); return true; })()`)); err != nil {
			t.Fatal(err)
		}
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(button))); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond) // the action, its answer and act()'s refresh (the page's own refresh is every 5 s)
		final, err = chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("msg").textContent`))
		if err != nil {
			t.Fatal(err)
		}
		seen, err = chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.__msgs`))
		if err != nil {
			t.Fatal(err)
		}
		return final, seen
	}

	if final, seen := shown("cart-9"); !strings.Contains(final, "HTTP 409") {
		t.Fatalf("premise: the failed redrive of cart-9 shows %q (texts taken: %q), want its HTTP 409", final, seen)
	}
	if final, seen := shown("token-42"); !strings.Contains(final, "HTTP 409") {
		t.Errorf("the failed redrive of token-42 shows %q 1.5 s after the click, want its HTTP 409; #msg took the texts %q", final, seen)
	}
}

// chromium starts a headless Chromium for the test, ended with it, and
// returns its context; the test is skipped where none is installed
// (.ci/run installs it).
func chromium(t *testing.T) context.Context {
	t.Helper()
	var path string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		t.Skip("no Chromium")
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox)...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(cancelBrowser)
	if err := chromedp.Do(bctx); err != nil { // starts the browser, for the life of bctx
		t.Fatalf("starting Chromium: %v", err)
	}
	return bctx
}
