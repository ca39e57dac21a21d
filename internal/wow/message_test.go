package wow

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wowd/wowd/handler"
)

// fixture is one entry of testdata/records/manifest.json: a record value
// and what decoding it gives.
type fixture struct {
	File  string `json:"file"`
	Kind  string `json:"kind"`
	About string `json:"about"`
	Topic *struct {
		Prefix    string `json:"prefix"`
		Context   string `json:"context"`
		Alias     string `json:"alias"`
		Aggregate string `json:"aggregate"`
		Name      string `json:"name"`
	} `json:"topic"`
	Key        string     `json:"key"`
	Want       *wantValue `json:"want"`
	Error      string     `json:"error"`  // a substring of the decode error
	Syntax     bool       `json:"syntax"` // the decode error is a syntax error
	CheckError string     `json:"checkError"`
}

type wantValue struct {
	ID            string      `json:"id"`
	Name          string      `json:"name"`
	ContextName   string      `json:"contextName"`
	AggregateName string      `json:"aggregateName"`
	AggregateID   string      `json:"aggregateId"`
	TenantID      string      `json:"tenantId"`
	RequestID     string      `json:"requestId"`
	CommandID     string      `json:"commandId"`
	Version       int64       `json:"version"`
	HasVersion    bool        `json:"hasVersion"`
	CreateTime    int64       `json:"createTime"`
	Header        [][2]string `json:"header"`
	Events        []string    `json:"events"`
	LocalFirst    bool        `json:"localFirst"`
	Compensation  *struct {
		ID        string `json:"id"`
		Context   string `json:"context"`
		Processor string `json:"processor"`
		Function  string `json:"function"`
	} `json:"compensation"`
}

func loadFixtures(t testing.TB) []fixture {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "records", "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fs []fixture
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&fs); err != nil {
		t.Fatalf("manifest: %v", err)
	}
	return fs
}

func (f fixture) value(t testing.TB) []byte {
	t.Helper()
	v, err := os.ReadFile(filepath.Join("testdata", "records", f.File))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func (f fixture) kind(t testing.TB) Kind {
	k, err := handler.ParseKind(f.Kind)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestDecodeFixtures(t *testing.T) {
	fixtures := loadFixtures(t)
	if len(fixtures) < 40 {
		t.Fatalf("only %d fixtures", len(fixtures))
	}
	var reused Message // one Message for all, to test reuse
	for _, f := range fixtures {
		name := strings.TrimSuffix(f.File, filepath.Ext(f.File))
		if f.CheckError != "" {
			name += "/check-" + f.CheckError
		}
		t.Run(name, func(t *testing.T) {
			value, kind := f.value(t), f.kind(t)
			m, err := Decode(kind, value)
			rerr := reused.Decode(kind, value)
			if (err == nil) != (rerr == nil) {
				t.Fatalf("Decode: %v; reused Message: %v", err, rerr)
			}
			if valid := json.Valid(value); valid != !f.Syntax {
				t.Fatalf("json.Valid = %v, but the fixture says syntax error %v", valid, f.Syntax)
			}
			if f.Error != "" {
				checkError(t, err, kind, f.Error, f.Syntax)
				if reused.ID != "" || len(reused.Header) > 0 || len(reused.Events) > 0 || reused.Kind != kind {
					t.Errorf("failed Decode left %+v", reused)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			compare(t, m, kind, f.Want)
			compare(t, &reused, kind, f.Want)

			if got := Topic(f.Topic.Prefix, f.Topic.Alias, f.Topic.Aggregate, kind); got != f.Topic.Name {
				t.Errorf("Topic = %q, want %q", got, f.Topic.Name)
			}
			err = m.Check([]byte(f.Key), f.Topic.Context, f.Topic.Aggregate)
			switch f.CheckError {
			case "":
				if err != nil {
					t.Errorf("Check: %v", err)
				}
			case "key":
				if !errors.Is(err, ErrKeyMismatch) {
					t.Errorf("Check = %v, want ErrKeyMismatch", err)
				}
			case "topic":
				if !errors.Is(err, ErrTopicMismatch) {
					t.Errorf("Check = %v, want ErrTopicMismatch", err)
				}
			default:
				t.Fatalf("unknown checkError %q", f.CheckError)
			}
		})
	}
}

func checkError(t *testing.T, err error, kind Kind, want string, syntax bool) {
	t.Helper()
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("error %v (%T), want a *DecodeError containing %q", err, err, want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not contain %q", err, want)
	}
	if de.Syntax != syntax || de.Kind != kind {
		t.Errorf("error %q: Syntax %v, Kind %v; want %v, %v", err, de.Syntax, de.Kind, syntax, kind)
	}
	if !strings.HasPrefix(err.Error(), "wow "+kind.String()+": ") {
		t.Errorf("error %q does not name the kind", err)
	}
}

func compare(t *testing.T, m *Message, kind Kind, w *wantValue) {
	t.Helper()
	if w == nil {
		t.Fatal("fixture has neither want nor error")
	}
	strs := []struct{ name, got, want string }{
		{"ID", m.ID, w.ID}, {"Name", m.Name, w.Name}, {"ContextName", m.ContextName, w.ContextName},
		{"AggregateName", m.AggregateName, w.AggregateName}, {"AggregateID", m.AggregateID, w.AggregateID},
		{"TenantID", m.TenantID, w.TenantID}, {"RequestID", m.RequestID, w.RequestID},
		{"CommandID", m.CommandID, w.CommandID},
	}
	for _, s := range strs {
		if s.got != s.want {
			t.Errorf("%s = %q, want %q", s.name, s.got, s.want)
		}
	}
	if m.Kind != kind {
		t.Errorf("Kind = %v, want %v", m.Kind, kind)
	}
	if m.Version != w.Version || m.HasVersion != w.HasVersion {
		t.Errorf("Version = %d (%v), want %d (%v)", m.Version, m.HasVersion, w.Version, w.HasVersion)
	}
	if m.CreateTime != w.CreateTime {
		t.Errorf("CreateTime = %d, want %d", m.CreateTime, w.CreateTime)
	}
	header := make([][2]string, len(m.Header))
	for i, h := range m.Header {
		header[i] = [2]string{h.Key, h.Value}
	}
	if !slices.Equal(header, w.Header) {
		t.Errorf("Header = %q,\nwant %q", header, w.Header)
	}
	for _, h := range w.Header {
		if v, ok := m.HeaderValue(h[0]); !ok || v != h[1] {
			t.Errorf("HeaderValue(%q) = %q, %v", h[0], v, ok)
		}
	}
	if _, ok := m.HeaderValue("no such key"); ok {
		t.Error("HeaderValue of a missing key is set")
	}
	if !slices.Equal(m.Events, w.Events) && len(m.Events)+len(w.Events) > 0 {
		t.Errorf("Events = %q, want %q", m.Events, w.Events)
	}
	if m.LocalFirst() != w.LocalFirst {
		t.Errorf("LocalFirst = %v, want %v", m.LocalFirst(), w.LocalFirst)
	}
	c, ok := m.Compensation()
	switch {
	case ok != (w.Compensation != nil):
		t.Errorf("Compensation = %+v, %v; want %+v", c, ok, w.Compensation)
	case ok:
		want := Compensation{w.Compensation.ID, w.Compensation.Context, w.Compensation.Processor, w.Compensation.Function}
		if c != want {
			t.Errorf("Compensation = %+v, want %+v", c, want)
		}
		if !c.Matches(want.Context, want.Processor, want.Function) || c.Matches(want.Context, want.Processor, "other") {
			t.Errorf("Matches is wrong for %+v", c)
		}
	}
}

// TestDecodeKeepsNoInput checks that the decoded strings are copies: the
// value may be overwritten after Decode.
func TestDecodeKeepsNoInput(t *testing.T) {
	f := loadFixtures(t)[0]
	value := f.value(t)
	m, err := Decode(f.kind(t), value)
	if err != nil {
		t.Fatal(err)
	}
	for i := range value {
		value[i] = 'X'
	}
	compare(t, m, f.kind(t), f.Want)
}

func TestDecodeUnknownKind(t *testing.T) {
	f := loadFixtures(t)[0]
	_, err := Decode(Kind(9), f.value(t))
	if err == nil || !strings.Contains(err.Error(), "unknown message kind") {
		t.Errorf("Decode with kind 9: %v", err)
	}
}

// TestDecodeKinds decodes one value as each kind: fields of other kinds
// are ignored, and each kind requires its own.
func TestDecodeKinds(t *testing.T) {
	value := []byte(`{"id":"i","name":"n","contextName":"c","aggregateName":"a","aggregateId":"k",` +
		`"commandId":"ci","aggregateVersion":2,"version":5,"body":[{"name":"e"}],"state":{},"deleted":false}`)
	cmd, err := Decode(KindCommand, value)
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Name != "n" || cmd.CommandID != "" || cmd.Version != 2 || len(cmd.Events) != 0 {
		t.Errorf("as a command: %+v", cmd)
	}
	for _, k := range []Kind{KindEvent, KindState} {
		ev, err := Decode(k, value)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Name != "" || ev.CommandID != "ci" || ev.Version != 5 || !slices.Equal(ev.Events, []string{"e"}) {
			t.Errorf("as %v: %+v", k, ev)
		}
	}
	// A command's body may be anything; a stream's must be events.
	value = []byte(`{"id":"i","name":"n","contextName":"c","aggregateName":"a","aggregateId":"k","body":7}`)
	if _, err := Decode(KindCommand, value); err != nil {
		t.Errorf("command with body 7: %v", err)
	}
	if _, err := Decode(KindEvent, value); err == nil || !strings.Contains(err.Error(), "body is a number") {
		t.Errorf("event with body 7: %v", err)
	}
}

// TestDecodeErrors covers errors the fixtures do not.
func TestDecodeErrors(t *testing.T) {
	const base = `"id":"i","contextName":"c","aggregateName":"a","aggregateId":"k","name":"n"`
	tests := []struct {
		kind  Kind
		value string
		want  string
	}{
		{KindCommand, `{` + base + `,"createTime":-9223372036854775809}`, "createTime -9223372036854775809 is out of range"},
		{KindCommand, `{` + base + `,"createTime":9223372036854775808}`, "createTime 9223372036854775808 is out of range"},
		{KindCommand, `{` + base + `,"createTime":true}`, "createTime is a boolean, want an integer"},
		{KindCommand, `{` + base + `,"header":{"a":"x","b":null}}`, `header "b" is null, want a string`},
		{KindCommand, `{` + base + `,"header":{"b":null,"b":"ok","c":[]}}`, `header "c" is an array, want a string`},
		{KindCommand, `{` + base + `,"header":{"b":"ok"},"header":[]}`, "header is an array, want an object"},
		{KindCommand, `{` + base + `,"requestId":1}`, "requestId is a number, want a string"},
		{KindCommand, `{` + base + `,"id":null}`, "id is null, want a string"},
		{KindCommand, `{"contextName":"c"}`, "missing id"},
		{KindCommand, `{}`, "missing id"},
		{KindCommand, `"x"`, "the value is a string, want an object"},
		{KindCommand, `null`, "the value is null, want an object"},
		{KindCommand, `  `, "empty value"},
		{KindEvent, `{` + base + `,"body":[],"body":null}`, "body is null, want an array of events"},
		{KindEvent, `{` + base + `,"commandId":false,"body":[]}`, "commandId is a boolean, want a string"},
		{KindEvent, `{` + base + `,"body":[{"name":"x","name":2}]}`, "body[0].name is a number, want a string"},
		{KindEvent, `{` + base + `,"body":[{"name":1,"name":"x"},{}]}`, "body[1] has no name"},
		{KindState, `{` + base + `,"body":[{"name":"x"}],"version":1.5e0}`, "version 1.5e0 is not an integer"},
		// A domain event stream is no state event: Wow's deserializer
		// takes state as an object and reads deleted at once.
		{KindState, `{` + base + `,"body":[{"name":"x"}]}`, "missing state (a state event carries the aggregate's state)"},
		{KindState, `{` + base + `,"body":[{"name":"x"}],"state":null,"deleted":false}`, "state is null, want the aggregate's state, an object"},
		{KindState, `{` + base + `,"body":[{"name":"x"}],"state":{},"state":[],"deleted":false}`, "state is an array, want the aggregate's state, an object"},
		{KindState, `{` + base + `,"body":[{"name":"x"}],"state":{}}`, "missing deleted"},
		{KindCommand, `{` + base + `,"aggregateVersion":[1]}`, "aggregateVersion is an array, want an integer"},
		{KindCommand, `{` + base + `,"x":tru}`, "invalid character '}' in literal true"},
		{KindCommand, `{` + base + `,"x":-}`, "invalid character '}' in numeric literal"},
		{KindCommand, `{` + base + `,"x":1.}`, "after decimal point in numeric literal"},
		{KindCommand, `{` + base + `,"x":1e+}`, "in exponent of numeric literal"},
		{KindCommand, `{` + base + `,"x":"\u12"}`, `in \u hexadecimal character escape`},
		{KindCommand, `{` + base + `,"x":[1 2]}`, "invalid character '2' after an array element"},
		{KindCommand, `{` + base + `,"x":{"a" 1}}`, "invalid character '1' after an object key"},
		{KindCommand, `{` + base + `,"x":{1:1}}`, "looking for the beginning of an object key"},
		{KindCommand, `{` + base + `,}`, "looking for the beginning of an object key"},
		{KindCommand, `{` + base + `,"x":[1,]}`, "invalid character ']' looking for the beginning of a value"},
		{KindCommand, "{" + base + ",\"x\":\"\xff\x01\"}", `invalid character '\x01' in string literal`},
		{KindCommand, "\xef\xbb\xbf{" + base + "}", "invalid character byte 0xef looking for the beginning of a value"},
	}
	for _, tt := range tests {
		_, err := Decode(tt.kind, []byte(tt.value))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Decode(%v, %q) = %v, want an error containing %q", tt.kind, tt.value, err, tt.want)
			continue
		}
		if valid := json.Valid([]byte(tt.value)); valid == err.(*DecodeError).Syntax {
			t.Errorf("Decode(%v, %q): Syntax = %v, but json.Valid = %v", tt.kind, tt.value, !valid, valid)
		}
	}
}

func TestDecodeNumbers(t *testing.T) {
	tests := []struct {
		text string
		want int64
	}{
		{"0", 0}, {"-0", 0}, {"7", 7}, {"-7", -7}, {"3.0", 3}, {"3.000e0", 3}, {"30e-1", 3},
		{"0.5e1", 5}, {"1E2", 100}, {"1e+2", 100}, {"0e999999999999", 0}, {"0.0", 0},
		{"1755868563012", 1755868563012}, {"1.755868563012E12", 1755868563012},
		{"9223372036854775807", 9223372036854775807}, {"-9223372036854775808", -9223372036854775808},
		{"922337203685477580.7e1", 9223372036854775807}, {"-9.223372036854775808e18", -9223372036854775808},
		{"000", 0}, // not JSON, but parseInt needs no more than digits
		{"123456789012345678", 123456789012345678},
		{"0.00000000000000000000000000001e29", 1},
	}
	for _, tt := range tests {
		got, reason := parseInt([]byte(tt.text))
		if got != tt.want || reason != "" {
			t.Errorf("parseInt(%s) = %d, %q; want %d", tt.text, got, reason, tt.want)
		}
	}
	for _, text := range []string{"9223372036854775808", "-9223372036854775809", "1e19", "1e999999999999", "12345678901234567890"} {
		if _, reason := parseInt([]byte(text)); reason != "is out of range" {
			t.Errorf("parseInt(%s): %q, want out of range", text, reason)
		}
	}
	for _, text := range []string{"0.5", "1e-1", "-1.5", "1.0000000000000000000000001", "5e-999999999999"} {
		if _, reason := parseInt([]byte(text)); reason != "is not an integer" {
			t.Errorf("parseInt(%s): %q, want not an integer", text, reason)
		}
	}
}

func TestHeaderDuplicatesLarge(t *testing.T) {
	// More fields than maxLinearHeader: duplicates are found with a map.
	var b strings.Builder
	b.WriteString(`{"id":"i","contextName":"c","aggregateName":"a","aggregateId":"k","name":"n","header":{`)
	for i := range 100 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"k` + string(rune('a'+i%40)) + `":"v` + string(rune('0'+i%10)) + `"`)
	}
	b.WriteString(`}}`)
	var m Message
	for range 2 { // the second time reuses the index
		if err := m.Decode(KindCommand, []byte(b.String())); err != nil {
			t.Fatal(err)
		}
		if len(m.Header) != 40 {
			t.Fatalf("%d header fields, want 40", len(m.Header))
		}
		// key "ka" is written at i = 0, 40 and 80: the last value is v0.
		if m.Header[0].Key != "ka" || m.Header[0].Value != "v0" || m.Header[39].Key != "k"+string(rune('a'+39)) {
			t.Errorf("Header = %v", m.Header[:3])
		}
		if v, _ := m.HeaderValue("kb"); v != "v1" {
			t.Errorf("kb = %q", v)
		}
	}
}

// TestHeaderHostile checks that header fields of the wrong type, written
// many times, cost linear time: four times the input may take about four
// times as long (a quadratic scan would take sixteen). Both sizes run in the
// same process, so the ratio holds on a slow or loaded machine.
func TestHeaderHostile(t *testing.T) {
	hostile := func(n int) []byte {
		var b strings.Builder
		b.WriteString(`{"id":"i","contextName":"c","aggregateName":"a","aggregateId":"k","name":"n","header":{`)
		for i := range n {
			fmt.Fprintf(&b, `"k%d":1,"k%d":"v",`, i%1000, i%1000)
		}
		b.WriteString(`"last":[]}}`)
		return []byte(b.String())
	}
	decode := func(v []byte) time.Duration {
		runtime.GC() // each run starts from an empty heap and runs without a collection
		start := time.Now()
		_, err := Decode(KindCommand, v)
		if err == nil || !strings.Contains(err.Error(), `header "last" is an array`) {
			t.Fatalf("Decode = %v", err)
		}
		return time.Since(start)
	}
	// The best of seven runs of each, interleaved, so that a pause or a
	// busy neighbour has to hit every run of one size to skew the ratio.
	// The collector is off while they run: its cycles, started by the
	// other size's garbage, made the ratio swing from 7 to 12 with linear
	// decoding.
	// Sizes whose decoding state fits a core's L2 cache: at 100,000
	// fields the larger one's did not, and a loaded machine's cache misses
	// made linear decoding look 12x.
	smallIn, largeIn := hostile(8_000), hostile(32_000)
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	small, large := time.Duration(1<<62), time.Duration(1<<62)
	for range 7 {
		small = min(small, decode(smallIn))
		large = min(large, decode(largeIn))
	}
	ratio := float64(large) / float64(small)
	t.Logf("4x the input took %.1fx as long (%v vs %v)", ratio, large, small)
	if ratio > 10 {
		t.Errorf("not linear: 4x the input took %.1fx as long (%v vs %v)", ratio, large, small)
	}
}

func TestSnakeName(t *testing.T) {
	tests := map[string]string{
		"me.ahoo.wow.example.api.cart.AddCartItem":   "add_cart_item",
		"me.ahoo.wow.example.api.cart.CartItemAdded": "cart_item_added",
		"CreateCartItem":           "create_cart_item", // Wow's NamingConverterBehaviorTest
		"WowIsGreat":               "wow_is_great",     // Wow's PascalCaseStrategyBehaviorTest segments
		"a.b.HTTPRequestSent":      "h_t_t_p_request_sent",
		"Order2Created":            "order2_created",
		"V2OrderCreated":           "v2_order_created",
		"Add_Item":                 "add__item",
		"addItem":                  "add_item",
		"me.ahoo.Outer.Inner":      "inner",
		"me.ahoo.Outer$InnerEvent": "inner_event",
		"X":                        "x",
		"":                         "",
		"pkg.":                     "",
		"ÄpfelGekauft":             "äpfel_gekauft",
		"OrderÜberwiesen":          "orderüberwiesen", // [A-Z] is ASCII only
	}
	for in, want := range tests {
		if got := SnakeName(in); got != want {
			t.Errorf("SnakeName(%q) = %q, want %q", in, got, want)
		}
	}
}
