package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/admin"
	"github.com/wowd/wowd/internal/park"
	"github.com/wowd/wowd/internal/rewind"
)

// hostile are strings a producer or a handler can put in what the
// terminal tables show: an ANSI colour, a carriage return that overwrites
// the line, a C1 CSI, bidi overrides and isolates, and invalid UTF-8.
var hostile = []string{
	"cart-\x1b[31mred\x1b[0m",
	"cart\rfake-line",
	"cart\x9b2J",
	"cart\u0080\u009b",
	"cart\u202eevil",
	"cart\u2066iso\u2069",
	"cart\xff\xfe",
	"cart\x00\x07\x7f",
	"a\nb",
}

// checkTerminalSafe fails t when out holds a byte or rune that a terminal
// would act on rather than show: control characters other than the
// newlines of the table itself, bidi controls, or invalid UTF-8.
func checkTerminalSafe(t *testing.T, what, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Errorf("%s: output is not valid UTF-8:\n%q", what, out)
	}
	for i, r := range out {
		switch {
		case r == '\n':
		case r < 0x20, r >= 0x7f && r < 0xa0,
			r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
			t.Errorf("%s: raw %U at byte %d:\n%q", what, r, i, out)
			return
		}
	}
}

func TestTermSafe(t *testing.T) {
	for _, plain := range []string{"", "cart-1", "0191b0e6-7c4e-7d2a-9f3e-1f2d3c4b5a69", "Warenkorb-ü-日本", `with "quotes" and spaces`} {
		if got := termSafe(plain); got != plain {
			t.Errorf("termSafe(%q) = %q, want it unchanged", plain, got)
		}
	}
	for _, s := range hostile {
		got := termSafe(s)
		checkTerminalSafe(t, "termSafe", got)
		if !strings.HasPrefix(got, `"`) {
			t.Errorf("termSafe(%q) = %s, want it quoted", s, got)
		}
	}
}

func TestStatusTableEscapesKafkaStrings(t *testing.T) {
	for _, s := range hostile {
		st := sampleStatus(0)
		st.Instance = s
		st.Receivers[0].Partitions[0].Topic = s
		st.Hot = append(st.Hot, admin.HotAggregate{Dispatcher: "projection", Context: "shop", Aggregate: s, ID: s, Unfinished: 1})
		st.Oldest = append(st.Oldest, admin.OldAggregate{Dispatcher: "projection", Context: "shop", Aggregate: "cart", ID: s, Topic: s})
		st.Parked = admin.ParkedStatus{Available: true, Aggregates: []admin.ParkedAggregate{{
			Dispatcher: "projection", Context: "shop", Aggregate: "cart", ID: s, Topic: s, Class: s, Reason: "HTTP 400: " + s, Since: time.Now(),
		}}}
		var out bytes.Buffer
		if err := writeStatus(&out, st); err != nil {
			t.Fatal(err)
		}
		checkTerminalSafe(t, "wowd status", out.String())
		if !strings.Contains(out.String(), "hot-cart") {
			t.Errorf("a plain ID is not shown as it is:\n%s", out.String())
		}
	}
}

func TestParkedTablesEscapeKafkaStrings(t *testing.T) {
	now := time.Now()
	for _, s := range hostile {
		states := []*park.State{
			{Topic: "wow.shop.cart.event", Aggregate: "plain-cart", Since: now, Class: "permanent", Reason: "HTTP 400"},
			{Topic: s, Aggregate: s, Since: now, Class: s, Reason: "HTTP 400: " + s, Request: &park.Request{Action: park.Redrive, By: s}},
		}
		var out bytes.Buffer
		if err := writeParkedList(&out, states, now); err != nil {
			t.Fatal(err)
		}
		checkTerminalSafe(t, "wowd parked list", out.String())
		if !strings.Contains(out.String(), " plain-cart ") {
			t.Errorf("list: a plain ID is not shown as it is:\n%s", out.String())
		}

		rec := &kgo.Record{Topic: s + ".parked", Value: []byte("{}"), Timestamp: now, Headers: []kgo.RecordHeader{
			{Key: park.HeaderSourceTopic, Value: []byte(s)},
			{Key: park.HeaderSourcePartition, Value: []byte("0")},
			{Key: park.HeaderSourceOffset, Value: []byte("7")},
			{Key: park.HeaderReason, Value: []byte("HTTP 400: " + s)},
		}}
		out.Reset()
		if err := writeParkedShow(&out, states[1], []*kgo.Record{rec}, now); err != nil {
			t.Fatal(err)
		}
		checkTerminalSafe(t, "wowd parked show", out.String())
	}
}

func TestOneLineKeepsRunesWhole(t *testing.T) {
	s := strings.Repeat("ü", 70)
	got := oneLine(s, 60)
	if !utf8.ValidString(got) || utf8.RuneCountInString(got) != 60 {
		t.Errorf("oneLine of 70 ü to 60: %q (%d runes)", got, utf8.RuneCountInString(got))
	}
}

func TestStatusProblemsEscapeKafkaStrings(t *testing.T) {
	for _, s := range hostile {
		st := sampleStatus(400) // stuck: a problem names the topic
		st.Receivers[0].Partitions[0].Topic = s
		srv, _ := statusServer(t, st, "")
		code, out, errOut := runStatus(t, nil, "--admin", srv.URL)
		if code != 1 || !strings.Contains(out, "UNHEALTHY") {
			t.Fatalf("stuck: exit %d\n%s%s", code, out, errOut)
		}
		checkTerminalSafe(t, "wowd status problems", out)
		checkTerminalSafe(t, "wowd status error", errOut)
	}
}

// TestErrorsPrintNoTerminalControls: what a command's error says comes in
// part from Kafka (rewind names the members of a running group by their
// client IDs, which any client chooses): each line that would act on a
// terminal is quoted, and the others, the error's layout, stay as they are.
func TestErrorsPrintNoTerminalControls(t *testing.T) {
	err := &rewind.ActiveError{Members: map[string][]string{"g": {"m-1 (evil\x1b[2J\r on /10.0.0.1)"}}}
	got := termLines("wowd: " + err.Error())
	if strings.ContainsAny(got, "\x1b\r") {
		t.Fatalf("control bytes printed: %q", got)
	}
	if !strings.HasPrefix(got, "wowd: the dispatcher is running") || !strings.Contains(got, "\n") {
		t.Fatalf("the plain lines changed: %q", got)
	}
	// As the command line prints them.
	var stdout, stderr bytes.Buffer
	run([]string{"config", "validate", "--config", "/nonexistent/\x1b[2Jwowd.yaml"}, &stdout, &stderr, nil, handler.Default())
	if strings.ContainsAny(stderr.String(), "\x1b") || !strings.Contains(stderr.String(), `\x1b[2J`) {
		t.Fatalf("stderr: %q", stderr.String())
	}
}
