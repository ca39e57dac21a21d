package admin

import (
	"strings"
	"testing"
)

// The page offers only the actions a dispatcher can carry out: no park
// button by the hot aggregates of a dispatcher that does not park, and no
// skip or discard of a parked aggregate whose dispatcher's dead letters
// are off (both would answer 501); redrive stays.
func TestThePageOffersOnlyWhatTheDispatcherCanDo(t *testing.T) {
	src := newFakeSource()
	s, _ := testServer(t, Options{Source: src, Parked: &fakeParked{}})
	body := do(s, "GET", "/admin/", local).Body.String()
	for _, want := range []string{`data-action="park" data-dispatcher="proj" data-id="cart-7"`, `data-action="skip"`, `data-action="discard"`} {
		if !strings.Contains(body, want) {
			t.Fatalf("premise: a dispatcher that parks, with dead letters, is offered %s:\n%s", want, body)
		}
	}
	src.mu.Lock()
	src.statuses[0].Parks, src.statuses[0].DeadLetters = false, false
	src.mu.Unlock()
	body = do(s, "GET", "/admin/", local).Body.String()
	for _, unwanted := range []string{`data-action="park" data-dispatcher="proj" data-id="cart-7"`, `data-action="skip"`, `data-action="discard"`} {
		if strings.Contains(body, unwanted) {
			t.Errorf("a dispatcher that does not park, without dead letters, is offered %s", unwanted)
		}
	}
	if !strings.Contains(body, `data-action="redrive"`) || !strings.Contains(body, "dead letters off") {
		t.Errorf("the parked aggregate lost its redrive, or the page does not say why skip and discard are missing:\n%s", body)
	}
}
