package admin

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"html"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/wowd/wowd/internal/receiver"
)

// listed is a parked store that lists ids (of dispatcher proj) and records
// the actions.
type listed struct {
	fakeParked
	ids []string
}

func (p *listed) List(context.Context) ([]ParkedAggregate, error) {
	var out []ParkedAggregate
	for _, id := range p.ids {
		out = append(out, ParkedAggregate{Dispatcher: "proj", Context: "shop", Aggregate: "cart", ID: id, Topic: "wow.shop.cart.event",
			Class: "permanent", Reason: "http 400", Attempts: 1, Since: time.Now().Add(-time.Minute), Owned: true})
	}
	return out, nil
}

func (p *listed) actions() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.done)
}

// idsWithBytes are aggregate IDs a page must tell apart: bytes that are
// not UTF-8 (which a browser reads as U+FFFD), U+FFFD itself, and the
// characters a URL path gives a meaning to.
var idsWithBytes = []string{"cart-\xff", "cart-\xfe", "cart-\uFFFD", "a/b", "50%", "q?x#y", "&amp;", "sp ace"}

// inBrowser is an attribute's value as a browser's script reads it from
// the page (served as UTF-8): each invalid byte a U+FFFD, the character
// references resolved.
func inBrowser(attr string) string { return html.UnescapeString(strings.ToValidUTF8(attr, "\uFFFD")) }

// TestThePageButtonsActOnTheExactBytesOfAnID: an aggregate ID that is not
// UTF-8 reached the page's buttons as its raw bytes, which the browser
// reads as U+FFFD: the park button of cart-\xff, of cart-\xfe and of
// cart-\uFFFD all parked cart-\uFFFD, and a parked a\xff's discard button
// discarded a\uFFFD. Each button must ask for its own aggregate: the URL
// its script builds (the data-id as it is) names the ID's exact bytes.
func TestThePageButtonsActOnTheExactBytesOfAnID(t *testing.T) {
	src := newFakeSource()
	src.statuses[0].Hot = src.statuses[0].Hot[:0]
	for i, id := range idsWithBytes {
		src.statuses[0].Hot = append(src.statuses[0].Hot, receiver.AggregateLoad{Aggregate: "cart", ID: id, Unfinished: 100 - i})
	}
	p := &listed{ids: idsWithBytes}
	s, _ := testServer(t, Options{Source: src, Parked: p})
	body := do(s, "GET", "/admin/?part=body&top=20", local).Body.String()
	buttons := regexp.MustCompile(`<button data-action="([a-z]+)" data-dispatcher="proj" data-id="([^"]*)"`).FindAllStringSubmatch(body, -1)
	var want []string
	for _, action := range []string{"park", "redrive", "skip", "discard"} {
		for _, id := range idsWithBytes {
			want = append(want, action+" proj "+id)
		}
	}
	if len(buttons) != len(want) {
		t.Fatalf("the page has %d buttons, want %d:\n%s", len(buttons), len(want), body)
	}
	for _, b := range buttons {
		// As the page's script does: the data-id in the URL as it is.
		target := "/admin/v1/dispatchers/proj/aggregates/" + inBrowser(b[2]) + "/" + b[1]
		if _, err := url.ParseRequestURI(target); err != nil || strings.ContainsAny(target, " #?\uFFFD") {
			t.Errorf("the %s button's URL %q is not one the browser sends as it is", b[1], target)
			continue
		}
		if w := do(s, "POST", target, local); w.Code != 202 {
			t.Errorf("POST %s: %d %s", target, w.Code, w.Body)
		}
	}
	got := p.actions()
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the page's buttons asked for\n%q\nwant\n%q", got, want)
	}
	// Shown readable and escaped, as before.
	for _, shown := range []string{`<td class="id">&#34;cart-\xff&#34;</td>`, `<td class="id">a/b</td>`, `<td class="id">&amp;amp;</td>`} {
		if !strings.Contains(body, shown) {
			t.Errorf("the page lacks %s", shown)
		}
	}
}

// TestTheStatusKeepsTheBytesOfAnID: JSON replaces bytes that are not
// UTF-8 with U+FFFD, so the status named the hot, oldest and parked
// aggregate cart-\xff as cart-\uFFFD, another aggregate. id_bytes carries
// such an ID's bytes (base64, as the state topic's aggregate_bytes); a
// UTF-8 ID has none.
func TestTheStatusKeepsTheBytesOfAnID(t *testing.T) {
	const id = "cart-\xff"
	src := newFakeSource()
	src.statuses[0].Hot[0].ID = id
	src.statuses[0].Oldest[0].ID = id
	s, _ := testServer(t, Options{Source: src, Parked: &listed{ids: []string{id, "cart-\uFFFD"}}})
	var st struct {
		Hot, Oldest []map[string]any
		Parked      struct{ Aggregates []map[string]any }
	}
	if err := json.Unmarshal(do(s, "GET", "/admin/v1/status", local).Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	wantBytes := base64.StdEncoding.EncodeToString([]byte(id))
	for name, list := range map[string][]map[string]any{"hot": st.Hot, "oldest": st.Oldest, "parked": st.Parked.Aggregates} {
		if len(list) == 0 {
			t.Fatalf("%s: none", name)
		}
		if got := list[0]["id_bytes"]; got != wantBytes {
			t.Errorf("%s %q: id_bytes %v, want %q (the bytes of %q)", name, list[0]["id"], got, wantBytes, id)
		}
		for _, a := range list[1:] {
			if b, ok := a["id_bytes"]; ok {
				t.Errorf("%s %q, valid UTF-8, has id_bytes %v", name, a["id"], b)
			}
		}
	}
}

// TestThePageInABrowserActsOnTheIDItNames: in Chromium, the park button
// of the hot aggregate cart-\xff parks cart-\xff (it parked cart-\uFFFD),
// and the park form sends the ID as typed: " x" parked "x", trimmed.
func TestThePageInABrowserActsOnTheIDItNames(t *testing.T) {
	bctx := chromium(t)
	src := newFakeSource()
	src.statuses[0].Hot = []receiver.AggregateLoad{{Aggregate: "cart", ID: "cart-\xff", Unfinished: 9}, {Aggregate: "cart", ID: "cart-\uFFFD", Unfinished: 8}}
	p := &listed{}
	s, err := New("127.0.0.1:0", Options{Source: src, Parked: p, SampleEvery: time.Hour})
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
	waitFor := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if slices.Contains(p.actions(), want) {
				return
			}
		}
		t.Errorf("the page asked for %q, want %q", p.actions(), want)
	}
	first := `#hot tbody tr:first-child button[data-action="park"]`
	if err := chromedp.Do(ctx,
		chromedp.Navigate("http://"+s.Addr()+"/admin/"),
		chromedp.WaitVisible(chromedp.CSS(first)),
		chromedp.Click(chromedp.CSS(first)),
	); err != nil {
		t.Fatal(err)
	}
	waitFor("park proj cart-\xff")
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS("#park-dispatcher"), "proj"),
		chromedp.SendKeys(chromedp.CSS("#park-id"), " x"),
		chromedp.Click(chromedp.CSS(`#park-form button[type="submit"]`)),
	); err != nil {
		t.Fatal(err)
	}
	waitFor("park proj  x")
}
