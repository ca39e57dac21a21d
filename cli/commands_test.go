package cli

// Review tests: each demonstrates a defect of the command line found in a
// review; they fail until it is fixed.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/park"
)

// freePort returns a loopback port nothing listens on (for a moment).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

// runCLI is run, with a panic reported as such instead of ending the
// test binary.
func runCLI(args ...string) (code int, stdout, stderr string, panicked any) {
	var out, errOut bytes.Buffer
	func() {
		defer func() { panicked = recover() }()
		code = run(args, &out, &errOut, nil, handler.Default())
	}()
	return code, out.String(), errOut.String(), panicked
}

// signalContext's stop is a context.CancelFunc: calls after the first do
// nothing. Its second call panicked (close of a closed channel). Found by
// review, as the next test.
func TestSignalContextStopsTwice(t *testing.T) {
	_, stop := signalContext()
	stop()
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("second call of signalContext's CancelFunc panicked: %v", p)
		}
	}()
	stop()
}

// `wowd dev --demo` with a configuration that reads no event topic is a
// configuration error, exit 2, before anything starts. The demo could not
// start; serve cancelled the signal context and its deferred cancel closed
// the same channel again: the process panicked, after "signal received,
// shutting down" though no signal came (and without the panic it would
// have exited 0). Found by review.
func TestDevDemoWithoutAnEventTopic(t *testing.T) {
	path := writeConfig(t, fmt.Sprintf(`wow:
  service: s
  kafka:
    bootstrap-servers: [127.0.0.1:%d]
  contexts:
    shop-service:
      alias: shop
      aggregates: [cart]
  dispatchers:
    commands:
      topics: [command]
      handler: {type: log}
  metrics:
    listen: ""
  log:
    level: error
  shutdown:
    timeout: 5s
  dev:
    partitions: 1
`, freePort(t)))
	code, out, errOut, panicked := runCLI("dev", "--demo", "--config", path)
	if panicked != nil {
		t.Fatalf("wowd dev --demo panicked: %v\n%s%s", panicked, out, errOut)
	}
	if code == ExitOK || !strings.Contains(errOut, "event topic") {
		t.Fatalf("wowd dev --demo without an event topic: exit %d, want a failure saying there is no event topic\n%s%s", code, out, errOut)
	}
}

// remoteBrokerYAML is a configuration whose broker is not on loopback: the
// embedded broker refuses it.
const remoteBrokerYAML = `wow:
  service: s
  kafka:
    bootstrap-servers: [10.1.1.1:9092]
  contexts:
    shop-service:
      aggregates: [cart]
  dispatchers:
    d:
      topics: [event]
      handler: {type: log}
  metrics:
    listen: ""
`

// `wowd dev` with a configuration whose bootstrap address is not loopback
// (WOWD_CONFIG left set to a real one, say) is a configuration error, exit
// 2; it exited 1, a runtime failure. Found by review.
func TestDevRemoteBrokerIsAConfigurationError(t *testing.T) {
	path := writeConfig(t, remoteBrokerYAML)
	code, out, errOut, panicked := runCLI("dev", "--config", path)
	if panicked != nil {
		t.Fatal(panicked)
	}
	if code != ExitConfig {
		t.Fatalf("exit %d, want %d (configuration error)\n%s%s", code, ExitConfig, out, errOut)
	}
}

// --partitions (and wow.dev.partitions) is refused above 1000. It was
// checked for >= 1 only, then converted to int32 for kfake: 2147483648
// wrapped to a negative count, which kfake replaced by its default of
// 2^31 partitions, and the broker's start never returned. Found by review.
func TestDevPartitionsOutOfRange(t *testing.T) {
	// A non-loopback broker makes the start fail at once where the
	// partitions are let through, instead of creating 2^31 partitions.
	path := writeConfig(t, remoteBrokerYAML)
	for _, args := range [][]string{
		{"dev", "--config", path, "--partitions", "2147483648"},
		{"dev", "--config", path, "--set", "wow.dev.partitions=2147483648"},
	} {
		code, out, errOut, panicked := runCLI(args...)
		if panicked != nil {
			t.Fatal(panicked)
		}
		if code != ExitConfig || !strings.Contains(errOut, "partitions") {
			t.Errorf("wowd %s: exit %d, want %d naming the partitions as out of range\n%s%s", strings.Join(args, " "), code, ExitConfig, out, errOut)
		}
	}
}

// When the embedded broker's port is taken (another wowd dev), the error
// says how to move it, as the metrics and admin listeners' errors name
// their keys; it said only "address already in use". Found by review.
func TestDevBrokerPortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	path := writeConfig(t, fmt.Sprintf(`wow:
  service: s
  kafka:
    bootstrap-servers: [%s]
  contexts:
    shop-service:
      aggregates: [cart]
  dispatchers:
    d:
      topics: [event]
      handler: {type: log}
  metrics:
    listen: ""
`, l.Addr()))
	code, out, errOut, panicked := runCLI("dev", "--config", path)
	if panicked != nil {
		t.Fatal(panicked)
	}
	if code == ExitOK || !strings.Contains(errOut, "wow.kafka.bootstrap-servers") {
		t.Fatalf("exit %d; the error does not name the setting that moves the broker (wow.kafka.bootstrap-servers)\n%s%s", code, out, errOut)
	}
}

// With more than one bounded context, `wowd dev --demo` writes each topic's
// events with its own context's name. It wrote the first context's
// (sorted) to every topic, and wowd dead-lettered the others' as
// mismatched ("the topic is for shop-service.cart, the message for
// billing-service.cart"). Found by review.
func TestDevDemoWritesTheContextOfEachTopic(t *testing.T) {
	// SIGINT stops wowd dev; caught here too, so that it can never end the
	// test binary.
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGINT)
	defer signal.Stop(sig)

	broker := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	path := writeConfig(t, `wow:
  service: two
  kafka:
    bootstrap-servers: [`+broker+`]
  contexts:
    billing-service:
      alias: billing
      aggregates: [invoice]
    shop-service:
      alias: shop
      aggregates: [cart]
  dispatchers:
    logit:
      topics: [event]
      handler: {type: log}
  metrics:
    listen: ""
  log:
    level: error
  shutdown:
    timeout: 5s
  dev:
    partitions: 1
`)
	type result struct {
		code        int
		out, errOut string
		panicked    any
	}
	done := make(chan result, 1)
	go func() {
		var r result
		r.code, r.out, r.errOut, r.panicked = runCLI("dev", "--demo", "--config", path)
		done <- r
	}()

	var got []string
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.ConsumeTopics("wow.shop.cart.event"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	for len(got) < 2 && ctx.Err() == nil {
		select {
		case r := <-done:
			cl.Close()
			t.Fatalf("wowd dev ended early: exit %d, panic %v\n%s%s", r.code, r.panicked, r.out, r.errOut)
		default:
		}
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		pcancel()
		fs.EachRecord(func(r *kgo.Record) {
			var m struct {
				ContextName string `json:"contextName"`
			}
			_ = json.Unmarshal(r.Value, &m)
			got = append(got, m.ContextName)
		})
	}
	cl.Close()

	if err := syscall.Kill(syscall.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.panicked != nil || r.code != ExitOK {
			t.Errorf("wowd dev after SIGINT: exit %d, panic %v\n%s%s", r.code, r.panicked, r.out, r.errOut)
		}
	case <-time.After(20 * time.Second):
		t.Error("wowd dev did not stop within 20s of SIGINT")
	}

	if len(got) == 0 {
		t.Fatal("no demo event on wow.shop.cart.event within 20s")
	}
	for _, cn := range got {
		if cn != "shop-service" {
			t.Fatalf("demo events on wow.shop.cart.event have contextName %q, want shop-service (wowd dead-letters them as mismatched); all: %q", cn, got)
		}
	}
}

// `wowd help no-such-command` is a usage error, exit 2, as an unknown
// command is everywhere; it showed the root help and exited 0. Found by
// review.
func TestHelpOfAnUnknownCommand(t *testing.T) {
	code, out, errOut, panicked := runCLI("help", "no-such-command")
	if panicked != nil {
		t.Fatal(panicked)
	}
	if code != ExitConfig {
		t.Fatalf("wowd help no-such-command: exit %d, want %d (unknown command)\n%s%s", code, ExitConfig, out, errOut)
	}
}

// `wowd parked list` shows two IDs differently when they differ: the ID
// "\xff" (the byte 0xff) and the ID `"\xff"` (six printable characters)
// showed the same, so an operator copying what the table showed could act
// on the other aggregate. Found by review.
func TestParkedListTellsIDsApart(t *testing.T) {
	now := time.Now()
	for _, pair := range [][2]string{{"\xff", `"\xff"`}, {"\x1b", `"\x1b"`}} {
		var rows []string
		for _, id := range pair {
			var b bytes.Buffer
			s := &park.State{Topic: "wow.shop.cart.event", Aggregate: id, Since: now, Class: "handler", Reason: "boom"}
			if err := writeParkedList(&b, []*park.State{s}, now); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(b.String()), "\n")
			rows = append(rows, lines[len(lines)-1])
		}
		if rows[0] == rows[1] {
			t.Errorf("aggregates %q and %q show the same in wowd parked list: %s", pair[0], pair[1], rows[0])
		}
	}
}

// An error reading the status shows the query wowd status added (top=10)
// as it is; it was masked as if it were a secret. Found by review.
func TestStatusErrorShowsItsOwnQuery(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	code, out, errOut, panicked := runCLI("status", "--admin", srv.URL)
	if panicked != nil {
		t.Fatal(panicked)
	}
	if code != ExitFailure || strings.Contains(errOut, "top=******") {
		t.Fatalf("exit %d; the error masks wowd's own query:\n%s%s", code, out, errOut)
	}
}
