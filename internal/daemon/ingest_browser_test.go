package daemon

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/handler"
)

// TestIngestRefusesWhatAWebPageSends: ingest on loopback without a token
// (the documented sidecar set-up) is reachable by any web page a browser
// on the machine opens. A page can POST to it across origins without a
// preflight (a "simple" request: text/plain, no custom header), and reach
// it from its own origin through a DNS name rebound to 127.0.0.1. Both
// must be refused (403, counted as unauthorized) and nothing handled or
// published; the admin listener refuses both already. Before, both were
// accepted (202): a page published a Wow message into the business's
// topics, marked as handled by this service. A request a Wow service sends
// (no Origin, addressed to 127.0.0.1 or localhost) is still accepted.
func TestIngestRefusesWhatAWebPageSends(t *testing.T) {
	const topic = "wow.example.cart.event"
	c := newCluster(t, kfake.SeedTopics(1, topic))
	cnt := &counter{n: map[string]int{}}
	var reg handler.Registry
	reg.Register(cnt.spec())
	rt := startInstance(t, c, &reg)
	defer stopRT(t, rt)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	addr := rt.MetricsAddr()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}

	for i, tc := range []struct {
		name    string
		host    string
		headers map[string]string
		want    int
	}{
		{"cross-site page", addr, map[string]string{"Content-Type": "text/plain;charset=UTF-8",
			"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}, http.StatusForbidden},
		{"cross-origin page, older browser", addr, map[string]string{"Content-Type": "text/plain",
			"Origin": "https://evil.example"}, http.StatusForbidden},
		{"DNS rebinding", "rebound.evil.example:" + port, map[string]string{"Content-Type": "application/json",
			"Origin": "http://rebound.evil.example:" + port, "Sec-Fetch-Site": "same-origin"}, http.StatusForbidden},
		{"Wow service", addr, map[string]string{"Content-Type": "application/json"}, http.StatusAccepted},
		{"Wow service, localhost", "localhost:" + port, nil, http.StatusAccepted},
	} {
		before := endOffsets(t, adm, topic)
		id := fmt.Sprintf("m%d", i)
		req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/messages/event", bytes.NewReader(event(id, "cart-1", "")))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = tc.host
		for k, v := range tc.headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: answered %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
		if tc.want == http.StatusAccepted {
			continue
		}
		if n := endOffsets(t, adm, topic) - before; n != 0 || cnt.get(id) != 0 {
			t.Errorf("%s: %d records published, handled %d times", tc.name, n, cnt.get(id))
		}
	}
	if n := ingestOutcome(t, rt, "unauthorized"); n != 3 {
		t.Errorf("counted %v as unauthorized, want 3", n)
	}
}
