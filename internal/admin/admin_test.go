package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wowd/wowd/internal/receiver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeSource is a daemon with one receiver of two partitions.
type fakeSource struct {
	mu       sync.Mutex
	statuses []receiver.Status
	counts   map[string]float64
	tops     []int
}

func newFakeSource() *fakeSource {
	since := time.Now().Add(-time.Hour)
	return &fakeSource{
		statuses: []receiver.Status{{
			Dispatcher: "proj", Context: "shop", GroupID: "svc.proj.shop", MemberID: "m-1", Generation: 3, Joined: true,
			InFlight: 12, MaxInFlight: 256, Parks: true, DeadLetters: true,
			Partitions: []receiver.PartitionState{
				{PartitionStatus: receiver.PartitionStatus{Topic: "wow.shop.cart.event", Partition: 0, Since: since, Committed: 90, Watermark: 95, HighWatermark: 120, Unfinished: 12, Span: 30, Paused: "span+share"}, First: 0},
				{PartitionStatus: receiver.PartitionStatus{Topic: "wow.shop.cart.event", Partition: 1, Since: since, Committed: -1, Watermark: -1, HighWatermark: -1}, First: -1},
				{PartitionStatus: receiver.PartitionStatus{Topic: "wow.shop.cart.event", Partition: 2, Since: since, Committed: -1, Watermark: -1, HighWatermark: 50, Unfinished: 10}, First: 20},
			},
			Hot: []receiver.AggregateLoad{
				{Aggregate: "cart", ID: "cart-7", Unfinished: 9},
				{Aggregate: "cart", ID: "cart/with/slashes", Unfinished: 4},
			},
			Oldest: []receiver.AggregateAge{
				{Aggregate: "cart", ID: "cart-7", Topic: "wow.shop.cart.event", Partition: 0, Offset: 95, Timestamp: time.Now().Add(-time.Minute)},
			},
		}},
		counts: map[string]float64{"handled": 100, "retried": 0},
	}
}

func (f *fakeSource) Receivers(top int) []receiver.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tops = append(f.tops, top)
	out := make([]receiver.Status, len(f.statuses))
	for i, s := range f.statuses {
		s.Hot, s.Oldest = s.Hot[:min(top, len(s.Hot))], s.Oldest[:min(top, len(s.Oldest))]
		out[i] = s
	}
	return out
}

func (f *fakeSource) Executor() Executor {
	return Executor{Workers: 4, Busy: 1, Mailboxes: 7, QueuedMailboxes: 2}
}

func (f *fakeSource) Outcomes(string, string) map[string]float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]float64, len(f.counts))
	for k, v := range f.counts {
		out[k] = v
	}
	return out
}

// fakeParked records the actions.
type fakeParked struct {
	mu   sync.Mutex
	done []string
	err  error
}

func (p *fakeParked) List(context.Context) ([]ParkedAggregate, error) {
	return []ParkedAggregate{
		{Dispatcher: "proj", Context: "shop", Aggregate: "cart", ID: "cart-9", Topic: "wow.shop.cart.event", Class: "permanent", Reason: "http 400", Attempts: 1, Since: time.Now().Add(-time.Minute)},
		{Dispatcher: "proj", Context: "shop", Aggregate: "cart", ID: "cart-10", Topic: "wow.shop.cart.event", Offset: 258, Class: "permanent", Reason: "http 409", Attempts: 1, Since: time.Now().Add(-time.Hour), HeadPastFailure: true},
	}, nil
}

func (p *fakeParked) record(action, d, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = append(p.done, action+" "+d+" "+id)
	return p.err
}
func (p *fakeParked) Park(_ context.Context, d, id string) error { return p.record("park", d, id) }
func (p *fakeParked) Redrive(_ context.Context, d, id string) error {
	return p.record("redrive", d, id)
}
func (p *fakeParked) Skip(_ context.Context, d, id string) error { return p.record("skip", d, id) }
func (p *fakeParked) Discard(_ context.Context, d, id string) error {
	return p.record("discard", d, id)
}

// testServer is a Server whose handler is called directly: no listener.
func testServer(t *testing.T, o Options) (*Server, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	o.Log = zap.New(core)
	if o.Source == nil {
		o.Source = newFakeSource()
	}
	o.Instance, o.Service, o.Version = "pod-1", "svc", "v1.2.3"
	return newServer(nil, o), logs
}

// do sends a request from remote (host:port) to the server's handler.
func do(s *Server, method, target, remote string, hdr ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, "http://127.0.0.1:9465"+target, nil)
	req.RemoteAddr = remote
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	s.srv.Handler.ServeHTTP(w, req)
	return w
}

const local = "127.0.0.1:50000"

func TestStatusJSON(t *testing.T) {
	s, _ := testServer(t, Options{Started: time.Now().Add(-90 * time.Second)})
	w := do(s, "GET", "/admin/v1/status?top=1", local)
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	var st Status
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	if st.Instance != "pod-1" || st.Version != "v1.2.3" || st.Service != "svc" || st.UptimeSeconds < 89 {
		t.Errorf("instance %+v", st)
	}
	if st.Executor != (Executor{Workers: 4, Busy: 1, Mailboxes: 7, QueuedMailboxes: 2}) {
		t.Errorf("executor %+v", st.Executor)
	}
	if len(st.Receivers) != 1 {
		t.Fatalf("receivers %+v", st.Receivers)
	}
	r := st.Receivers[0]
	if r.GroupID != "svc.proj.shop" || r.MemberID != "m-1" || r.Generation != 3 || r.Paused != PauseNone || r.InFlight != 12 {
		t.Errorf("receiver %+v", r)
	}
	p0, p1 := r.Partitions[0], r.Partitions[1]
	if p0.Committed != 90 || p0.Finished != 95 || p0.HighWatermark != 120 || p0.Lag != 30 || p0.InFlight != 12 || p0.Span != 30 ||
		p0.Paused != "span_cap+share_cap" || p0.PausedSeconds != 0 {
		t.Errorf("partition 0 %+v", p0)
	}
	if p1.Lag != -1 || p1.Paused != PauseNone {
		t.Errorf("partition 1 (nothing known) %+v", p1)
	}
	if p2 := r.Partitions[2]; p2.Lag != 30 {
		t.Errorf("partition 2, nothing committed yet, started at 20 of 50: lag %d, want 30", p2.Lag)
	}
	if len(st.Hot) != 1 || st.Hot[0].ID != "cart-7" || st.Hot[0].Dispatcher != "proj" || st.Hot[0].Unfinished != 9 {
		t.Errorf("hot (top=1) %+v", st.Hot)
	}
	if len(st.Oldest) != 1 || st.Oldest[0].ID != "cart-7" || st.Oldest[0].AgeSeconds < 59 {
		t.Errorf("oldest %+v", st.Oldest)
	}
	if st.Parked.Available || !strings.Contains(st.Parked.Error, "not wired") || st.Parked.Aggregates == nil {
		t.Errorf("parked without an implementation %+v", st.Parked)
	}

	for _, bad := range []string{"101", "-1", "x"} {
		if w := do(s, "GET", "/admin/v1/status?top="+bad, local); w.Code != 400 || !strings.Contains(w.Body.String(), "top=") {
			t.Errorf("top=%s: %d %s", bad, w.Code, w.Body)
		}
	}
	do(s, "GET", "/admin/v1/status", local)
	src := s.o.Source.(*fakeSource)
	if got := src.tops[len(src.tops)-1]; got != DefaultTop {
		t.Errorf("default top %d, want %d", got, DefaultTop)
	}
}

// TestTracker: rates over the last minute, and how long a partition has
// been paused and stalled, from successive observations.
func TestTracker(t *testing.T) {
	t0 := time.Now()
	tr := newTracker(t0)
	obs := func(at time.Duration, finished int64, paused string, handled float64) PartitionStatus {
		rs := []ReceiverStatus{{Dispatcher: "d", Context: "c", Partitions: []PartitionStatus{
			{Topic: "t", Partition: 0, Finished: finished, HighWatermark: 100, Committed: finished, Lag: 100 - finished, InFlight: 5, Paused: paused},
		}}}
		tr.observe(t0.Add(at), rs, []map[string]float64{{"handled": handled}})
		if at > 0 {
			if got, want := rs[0].Rates["handled"], handled/min(at, rateWindow+5*time.Second).Seconds(); at <= rateWindow && (got < want*0.99 || got > want*1.01) {
				t.Errorf("at %s: rate %v, want %v", at, got, want)
			}
		}
		return rs[0].Partitions[0]
	}
	obs(0, 10, PauseNone, 0)
	if p := obs(10*time.Second, 20, PauseShareCap, 100); p.StalledSeconds != 0 || p.PausedSeconds != 0 {
		t.Errorf("moving, just paused: %+v", p)
	}
	if p := obs(40*time.Second, 20, PauseShareCap, 100); p.StalledSeconds != 30 || p.PausedSeconds != 30 {
		t.Errorf("not moving for 30s, paused for 30s: %+v", p)
	}
	if p := obs(50*time.Second, 20, PauseNone, 100); p.StalledSeconds != 40 || p.PausedSeconds != 0 {
		t.Errorf("not moving for 40s, resumed: %+v", p)
	}
	// Past a minute, the rate counts only the last minute's messages.
	rs := []ReceiverStatus{{Dispatcher: "d", Context: "c"}}
	tr.observe(t0.Add(130*time.Second), rs, []map[string]float64{{"handled": 160}})
	if got := rs[0].Rates["handled"]; got < 0.7 || got > 1.1 {
		t.Errorf("rate over the last minute %v, want about 60 messages over 80s at most", got)
	}
	if len(tr.parts) != 0 {
		t.Errorf("a partition no longer reported is still tracked: %v", tr.parts)
	}
}

func TestAccessWithoutToken(t *testing.T) {
	p := &fakeParked{}
	s, logs := testServer(t, Options{Parked: p})
	if w := do(s, "GET", "/admin/v1/status", local); w.Code != http.StatusOK {
		t.Errorf("loopback read: %d", w.Code)
	}
	if w := do(s, "GET", "/admin/v1/status", "10.1.2.3:4000"); w.Code != http.StatusOK {
		t.Errorf("read from elsewhere on a loopback listener: %d", w.Code) // the listener is loopback: this is the same machine
	}
	if w := do(s, "GET", "/admin/v1/status", local, "Host", "rebound.example:9465"); w.Code != 403 {
		t.Errorf("a request addressed to another host name: %d, want 403", w.Code)
	}
	if w := do(s, "POST", "/admin/v1/dispatchers/proj/aggregates/cart-9/redrive", "10.1.2.3:4000"); w.Code != 403 {
		t.Errorf("an action from a non-loopback client: %d, want 403", w.Code)
	}
	if w := do(s, "POST", "/admin/v1/dispatchers/proj/aggregates/cart-9/redrive", local, "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"); w.Code != 403 {
		t.Errorf("a cross-site browser action: %d, want 403", w.Code)
	}
	if len(p.done) != 0 {
		t.Fatalf("refused requests acted: %v", p.done)
	}
	if w := do(s, "POST", "/admin/v1/dispatchers/proj/aggregates/cart-9/redrive", local); w.Code != http.StatusAccepted {
		t.Errorf("a loopback action: %d %s", w.Code, w.Body)
	}
	if logs.FilterMessage("admin request refused").Len() != 3 {
		t.Errorf("refusals logged %d times, want 3", logs.FilterMessage("admin request refused").Len())
	}
	done := logs.FilterMessage("admin action requested").All()
	if len(done) != 1 {
		t.Fatalf("actions logged: %v", logs.All())
	}
	f := done[0].ContextMap()
	if f["action"] != "redrive" || f["dispatcher"] != "proj" || f["aggregate"] != "cart-9" || f["remote"] != local || f["status"] != int64(http.StatusAccepted) {
		t.Errorf("action log fields %v", f)
	}
}

func TestAccessWithToken(t *testing.T) {
	tok := tokenFile(t)
	p := &fakeParked{}
	s, _ := testServer(t, Options{Parked: p, Token: tok})
	for _, auth := range []string{"", "Bearer wrong"} {
		if w := do(s, "GET", "/admin/v1/status", local, "Authorization", auth); w.Code != 401 || w.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("read with %q: %d", auth, w.Code)
		}
		if w := do(s, "POST", "/admin/v1/dispatchers/proj/aggregates/cart-9/skip", local, "Authorization", auth); w.Code != 401 {
			t.Errorf("action with %q: %d", auth, w.Code)
		}
		if w := do(s, "GET", "/admin/?part=body", local, "Authorization", auth); w.Code != 401 {
			t.Errorf("page body with %q: %d", auth, w.Code)
		}
	}
	// The page itself loads without the token, and shows nothing but the
	// request for it.
	w := do(s, "GET", "/admin/", local)
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "Token required") || strings.Contains(w.Body.String(), "cart-7") {
		t.Errorf("page without the token: %d\n%s", w.Code, w.Body)
	}
	if len(p.done) != 0 {
		t.Fatalf("unauthorized requests acted: %v", p.done)
	}
	const auth = "Bearer s3cret"
	if w := do(s, "GET", "/admin/v1/status", "10.1.2.3:4000", "Authorization", auth, "Host", "wowd.internal:9465"); w.Code != http.StatusOK {
		t.Errorf("read with the token from elsewhere: %d", w.Code)
	}
	if w := do(s, "POST", "/admin/v1/dispatchers/proj/aggregates/cart-9/skip", "10.1.2.3:4000", "Authorization", auth, "Host", "wowd.internal:9465"); w.Code != http.StatusAccepted {
		t.Errorf("action with the token from elsewhere: %d %s", w.Code, w.Body)
	}
	if w := do(s, "GET", "/admin/?part=body", local, "Authorization", auth); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "cart-7") {
		t.Errorf("page body with the token: %d", w.Code)
	}
}

func TestActions(t *testing.T) {
	s, _ := testServer(t, Options{})
	w := do(s, "POST", "/admin/v1/dispatchers/proj/aggregates/cart-9/redrive", local)
	if w.Code != 501 || !strings.Contains(w.Body.String(), "not wired") {
		t.Errorf("without parking: %d %s", w.Code, w.Body)
	}

	p := &fakeParked{}
	s, _ = testServer(t, Options{Parked: p})
	for _, a := range []string{"park", "redrive", "skip", "discard"} {
		if w := do(s, "POST", "/admin/v1/dispatchers/proj/aggregates/cart%2F9/"+a, local); w.Code != http.StatusAccepted {
			t.Errorf("%s: %d %s", a, w.Code, w.Body)
		}
	}
	if got := strings.Join(p.done, ", "); got != "park proj cart/9, redrive proj cart/9, skip proj cart/9, discard proj cart/9" {
		t.Errorf("actions done: %s", got)
	}
	if w := do(s, "POST", "/admin/v1/dispatchers/proj/aggregates/cart-9/explode", local); w.Code != 404 {
		t.Errorf("unknown action: %d", w.Code)
	}
	if w := do(s, "GET", "/admin/v1/dispatchers/proj/aggregates/cart-9/redrive", local); w.Code != 405 {
		t.Errorf("GET of an action: %d", w.Code)
	}
	for err, code := range map[error]int{ErrNotFound: 404, ErrConflict: 409, ErrNotSupported: 501, errors.New("broker down"): 500} {
		p.err = err
		if w := do(s, "POST", "/admin/v1/dispatchers/proj/aggregates/cart-9/skip", local); w.Code != code || !strings.Contains(w.Body.String(), err.Error()) {
			t.Errorf("%v: %d %s", err, w.Code, w.Body)
		}
	}
}

// TestPage: the page is whole without the network: no external reference,
// the data escaped, the script allowed by its nonce only.
func TestPage(t *testing.T) {
	src := newFakeSource()
	src.statuses[0].Hot[0].ID = `<script>alert(1)</script>`
	s, _ := testServer(t, Options{Source: src, Parked: &fakeParked{}})
	w := do(s, "GET", "/admin/", local)
	body := w.Body.String()
	if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("%d %s", w.Code, body)
	}
	for _, want := range []string{"wow.shop.cart.event/0", "span_cap", "cart/with/slashes", "cart-9", `data-action="redrive"`, "&lt;script&gt;alert(1)",
		"head past the failed message:</span> permanent: http 409"} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	for _, bad := range []string{"http://", "https://", "<script>alert", "<link", "src=", "head past the failed message:</span> permanent: http 400"} {
		if strings.Contains(body, bad) {
			t.Errorf("page holds %q", bad)
		}
	}
	csp := w.Header().Get("Content-Security-Policy")
	if !strings.Contains(csp, "script-src 'nonce-") || !strings.Contains(body, `<script nonce="`) || strings.Contains(csp, "script-src 'unsafe-inline'") {
		t.Errorf("CSP %q", csp)
	}
	part := do(s, "GET", "/admin/?part=body", local).Body.String()
	if strings.Contains(part, "<html") || !strings.Contains(part, "wow.shop.cart.event/0") {
		t.Errorf("body part:\n%s", part)
	}
}

// noHand is a parked store that cannot park by hand.
type noHand struct{ *fakeParked }

func (noHand) ParksByHand() bool { return false }

// TestPageWithoutParkByHand: a store that cannot park by hand gets no park
// form or button; the redrive buttons stay.
func TestPageWithoutParkByHand(t *testing.T) {
	s, _ := testServer(t, Options{Parked: noHand{&fakeParked{}}})
	body := do(s, "GET", "/admin/", local).Body.String()
	if strings.Contains(body, `data-action="park"`) || strings.Contains(body, `id="park-form"`) || !strings.Contains(body, `data-action="redrive"`) {
		t.Errorf("page offers parking by hand, or no redrive:\n%s", body)
	}
	s, _ = testServer(t, Options{Parked: &fakeParked{}})
	if body := do(s, "GET", "/admin/", local).Body.String(); !strings.Contains(body, `data-action="park"`) || !strings.Contains(body, `id="park-form"`) {
		t.Error("a store that parks by hand gets no park form or button")
	}
}
