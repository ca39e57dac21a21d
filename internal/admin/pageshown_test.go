package admin

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"
)

// oneParked lists one parked aggregate of dispatcher proj with the given
// ID and reason.
type oneParked struct {
	fakeParked
	id, reason string
}

func (p *oneParked) List(context.Context) ([]ParkedAggregate, error) {
	return []ParkedAggregate{{Dispatcher: "proj", Context: "shop", Aggregate: "cart", ID: p.id, Topic: "wow.shop.cart.event",
		Class: "permanent", Reason: p.reason, Attempts: 1, Since: time.Now().Add(-time.Minute), Owned: true}}, nil
}

// Aggregate IDs and handler reasons come from producers and handlers. A
// bidirectional override (U+202E) in one would make the page show it as
// another aggregate's ID (and the skip's confirmation ask about that one);
// bytes that are not UTF-8 would show as U+FFFD. The page shows such
// values quoted with escapes, as wowd parked does, while the actions still
// name the ID's exact bytes.
func TestThePageShowsUnprintableIDsEscaped(t *testing.T) {
	const id, reason = "cart-\u202e9-trac", "bad\xffbyte"
	s, _ := testServer(t, Options{Parked: &oneParked{id: id, reason: reason}})
	body := do(s, "GET", "/admin/", local).Body.String()
	outside := regexp.MustCompile(`data-id="[^"]*"`).ReplaceAllString(body, "")
	if strings.Contains(outside, "\u202e") {
		t.Errorf("the page shows the ID's U+202E as it is, outside the actions' data-id")
	}
	for _, want := range []string{`<td class="id">&#34;cart-\u202e9-trac&#34;</td>`, `&#34;bad\xffbyte&#34;`, `data-shown="&#34;cart-\u202e9-trac&#34;"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if !strings.Contains(body, `data-id="cart-%E2%80%AE9-trac"`) {
		t.Errorf("the actions no longer name the ID's exact bytes (percent-encoded, see TestThePageButtonsActOnTheExactBytesOfAnID)")
	}
}
