package cli

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/wowd/wowd/internal/admin"
	"github.com/wowd/wowd/internal/receiver"
)

// oneAggregate is a daemon whose one receiver has the aggregate id hot,
// oldest and parked.
type oneAggregate struct{ id string }

func (o oneAggregate) Receivers(int) []receiver.Status {
	return []receiver.Status{{
		Dispatcher: "projection", Context: "shop", GroupID: "carts.projection.shop", Joined: true, Parks: true,
		Hot:    []receiver.AggregateLoad{{Aggregate: "cart", ID: o.id, Unfinished: 7}},
		Oldest: []receiver.AggregateAge{{Aggregate: "cart", ID: o.id, Topic: "wow.shop.cart.event", Offset: 3, Timestamp: time.Now()}},
	}}
}
func (oneAggregate) Executor() admin.Executor                        { return admin.Executor{Workers: 1} }
func (oneAggregate) Outcomes(string, string) map[string]float64      { return nil }
func (o oneAggregate) Park(context.Context, string, string) error    { return nil }
func (o oneAggregate) Redrive(context.Context, string, string) error { return nil }
func (o oneAggregate) Skip(context.Context, string, string) error    { return nil }
func (o oneAggregate) Discard(context.Context, string, string) error { return nil }
func (o oneAggregate) List(context.Context) ([]admin.ParkedAggregate, error) {
	return []admin.ParkedAggregate{{Dispatcher: "projection", Context: "shop", Aggregate: "cart", ID: o.id,
		Topic: "wow.shop.cart.event", Class: "permanent", Reason: "boom", Attempts: 1, Since: time.Now(), Owned: true}}, nil
}

// TestStatusShowsANonUTF8IDAsWowdParkedTakesIt: an aggregate ID that is not
// UTF-8 (cart-\xff) reached wowd status through the admin JSON as
// cart-\uFFFD, shown as cart-� like the other aggregate cart-\uFFFD. Its
// tables show it quoted with Go escapes, "cart-\xff", under hot, oldest
// and parked: the form `wowd parked --aggregate` takes (see
// TestParkedTakesAnIDAsWowdStatusShowsIt).
func TestStatusShowsANonUTF8IDAsWowdParkedTakesIt(t *testing.T) {
	const id = "cart-\xff"
	src := oneAggregate{id}
	code, out, errOut := runStatus(t, nil, "--admin", adminURL(t, src))
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	shown := `"cart-\xff"`
	if n := strings.Count(out, " "+shown+" "); n != 3 {
		t.Errorf("wowd status shows %s %d times, want 3 (hot, oldest, parked):\n%s", shown, n, out)
	}
}

// adminURL serves the admin API of src until the test ends.
func adminURL(t *testing.T, src oneAggregate) string {
	t.Helper()
	s, err := admin.New("127.0.0.1:0", admin.Options{Source: src, Parked: src, Instance: "pod-1", Service: "carts", SampleEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = s.Shutdown(ctx)
	})
	return "http://" + s.Addr()
}

// TestStatusUnreachableHidesTheUserOfTheURL: --admin
// http://T0KENxyz@host (a token as the user name) that could not be
// reached printed Go's error, which shows the URL with its user name;
// errors show the URL redacted (the user name masked, or the password of
// user:password), as for a status that answers an error.
func TestStatusUnreachableHidesTheUserOfTheURL(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := strings.TrimPrefix(srv.URL, "http://")
	srv.Close()
	for user, secret := range map[string]string{"T0KENxyz": "T0KENxyz", "user:pa55word": "pa55word"} {
		code, out, errOut := runStatus(t, nil, "--admin", "http://"+user+"@"+addr, "--timeout", "2s")
		if code != ExitFailure || !strings.Contains(errOut, "reading the status") || !strings.Contains(errOut, "@"+addr+"/admin/v1/status") {
			t.Errorf("%s unreachable: exit %d, want %d naming the URL\n%s%s", user, code, ExitFailure, out, errOut)
		}
		if strings.Contains(errOut+out, secret) {
			t.Errorf("the error shows %s of --admin http://%s@…:\n%s", secret, user, errOut)
		}
	}
}
