package wow

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func readMetadata(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "metadata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestParseMetadata(t *testing.T) {
	m, err := ParseMetadata(readMetadata(t, "example-service.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.BoundedContexts) != 6 {
		t.Errorf("%d contexts, want 6", len(m.BoundedContexts))
	}
	ex := m.BoundedContexts["example-service"]
	if ex.Alias != "example" || ex.Description != "Example service: carts and orders" || len(ex.Scopes) != 3 {
		t.Errorf("example-service = %+v", ex)
	}
	cart := ex.Aggregates["cart"]
	if cart.Type != "me.ahoo.wow.example.domain.cart.Cart" || cart.TenantID != "(0)" || cart.ID != "" ||
		len(cart.Commands) != 4 || len(cart.Events) != 3 {
		t.Errorf("cart = %+v", cart)
	}
	if order := ex.Aggregates["order"]; order.TenantID != "" || order.ID != "orderIdGenerator" {
		t.Errorf("order = %+v", order)
	}
	if got := m.BoundedContexts["payment-service"].Alias; got != "payment-service" {
		t.Errorf("blank alias became %q, want the context name", got)
	}
	if got, want := cart.CommandNames(), []string{"add_cart_item", "remove_cart_item", "change_quantity", "mounted_command"}; !slices.Equal(got, want) {
		t.Errorf("CommandNames = %q, want %q", got, want)
	}
	if got, want := cart.EventNames(), []string{"cart_item_added", "cart_item_removed", "cart_quantity_changed"}; !slices.Equal(got, want) {
		t.Errorf("EventNames = %q, want %q", got, want)
	}

	got := m.Contexts()
	want := map[string]Context{
		"example-service": {Alias: "example", Aggregates: []string{"cart", "order"}},
		"payment-service": {Alias: "payment-service", Aggregates: []string{"payment", "refund"}},
	}
	if len(got) != len(want) {
		t.Errorf("Contexts = %v, want %v", got, want)
	}
	for name, w := range want {
		if g := got[name]; g.Alias != w.Alias || !slices.Equal(g.Aggregates, w.Aggregates) {
			t.Errorf("Contexts[%q] = %+v, want %+v", name, g, w)
		}
	}
}

func TestParseMetadataErrors(t *testing.T) {
	tests := []struct {
		file string
		want []string
	}{
		{"alias-conflict.json", []string{
			`alias "billing" is shared by contexts "billing", "billing-v2"`,
			`alias "order" is shared by contexts "order", "order-legacy", "order-service"`,
		}},
		{"syntax-error.json", []string{"invalid JSON at line 6, column 65: invalid character '}'"}},
		{"wrong-type.json", []string{"wrong type of value ending at line 4, column 17: json: cannot unmarshal number"}},
		{"builtins-only.json", []string{`no aggregates: none of the contexts "wow", "wow.command" declares one`}},
		{"empty-contexts.json", []string{"no bounded contexts"}},
	}
	for _, tt := range tests {
		_, err := ParseMetadata(readMetadata(t, tt.file))
		if err == nil {
			t.Errorf("%s: no error", tt.file)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not contain %q", tt.file, err, w)
			}
		}
	}
	for _, data := range []string{``, `{"contexts":`, `[]`, `{"contexts":{"":{"aggregates":{"a":{}}}}}`,
		`{"contexts":{"c":{"aggregates":{"":{}}}}}`, `{"contexts":null}`} {
		if _, err := ParseMetadata([]byte(data)); err == nil {
			t.Errorf("ParseMetadata(%q): no error", data)
		}
	}
}

func TestLoadMetadata(t *testing.T) {
	ctx := context.Background()
	example := readMetadata(t, "example-service.json")
	file := filepath.Join("testdata", "metadata", "example-service.json")
	if m, err := LoadMetadata(ctx, file, time.Second); err != nil || len(m.Contexts()) != 2 {
		t.Errorf("LoadMetadata(%s) = %v", file, err)
	}

	missing := filepath.Join(t.TempDir(), "wow-metadata.json")
	_, err := LoadMetadata(ctx, missing, time.Second)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "wow metadata "+missing+": file not found") {
		t.Errorf("missing file: %v", err)
	}
	bad := filepath.Join("testdata", "metadata", "syntax-error.json")
	if _, err := LoadMetadata(ctx, bad, 0); err == nil || !strings.Contains(err.Error(), "wow metadata "+bad+": invalid JSON at line 6") {
		t.Errorf("syntax error: %v", err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /wow/metadata", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") != "application/json" {
			t.Errorf("Accept: %q", r.Header.Get("Accept"))
		}
		w.Write(example)
	})
	mux.HandleFunc("GET /bad/metadata", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"contexts": {"x": }`))
	})
	mux.HandleFunc("GET /truncated/metadata", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"contexts":{`))
	})
	mux.HandleFunc("GET /empty/metadata", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("GET /slow/metadata", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	if m, err := LoadMetadata(ctx, srv.URL+"/wow/metadata", time.Second); err != nil || len(m.Contexts()) != 2 {
		t.Errorf("LoadMetadata over HTTP: %v", err)
	}
	tests := []struct {
		path string
		want string
	}{
		{"/nowhere", ": HTTP status 404 Not Found: \"404 page not found\""},
		{"/bad/metadata", ": invalid JSON at line 1, column 20: invalid character '}'"},
		{"/truncated/metadata", ": invalid JSON at line 1, column 13: unexpected end of JSON input"},
		{"/empty/metadata", ": empty: want the JSON of wow-metadata.json"},
		{"/slow/metadata", ": no answer within 100ms: "},
	}
	for _, tt := range tests {
		url := srv.URL + tt.path
		_, err := LoadMetadata(ctx, url, 100*time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), "wow metadata "+url+tt.want) {
			t.Errorf("LoadMetadata(%s) = %v, want %q", url, err, tt.want)
		}
	}
	_, err = LoadMetadata(ctx, srv.URL+"/slow/metadata", 100*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("timeout error %v does not wrap context.DeadlineExceeded", err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := LoadMetadata(canceled, srv.URL+"/wow/metadata", 0); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v", err)
	}
}

func TestAgrees(t *testing.T) {
	m, err := ParseMetadata(readMetadata(t, "example-service.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Agrees(m.Contexts()); err != nil {
		t.Errorf("Agrees(Contexts()) = %v", err)
	}
	same := map[string]Context{
		"example-service": {Alias: "example", Aggregates: []string{"order", "cart"}}, // any order
		"payment-service": {Aggregates: []string{"refund", "payment"}},               // blank alias: the name
	}
	if err := m.Agrees(same); err != nil {
		t.Errorf("Agrees = %v", err)
	}
	if err := m.Agrees(map[string]Context{"example-service": same["example-service"]}); err != nil {
		t.Errorf("a subset of the contexts: %v", err)
	}

	err = m.Agrees(map[string]Context{
		"example-service": {Alias: "ex", Aggregates: []string{"cart", "basket", "basket"}},
		"unknown-service": {Alias: "unknown", Aggregates: []string{"a"}},
		"payment-service": {Alias: "payment", Aggregates: []string{"payment", "refund"}},
	})
	var mis *MismatchError
	if !errors.As(err, &mis) {
		t.Fatalf("Agrees = %v, want a *MismatchError", err)
	}
	want := []Difference{
		{"example-service", "", `alias "ex", but the metadata has "example"`},
		{"example-service", "basket", "not in the metadata"},
		{"example-service", "order", "in the metadata but not inline"},
		{"payment-service", "", `alias "payment", but the metadata has "payment-service"`},
		{"unknown-service", "", "not in the metadata"},
	}
	if !slices.Equal(mis.Differences, want) {
		t.Errorf("Differences:\n%v\nwant\n%v", mis.Differences, want)
	}
	for _, w := range []string{`context "example-service", aggregate "basket": not in the metadata`, `context "unknown-service": not in the metadata`} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
}

func TestTopic(t *testing.T) {
	tests := []struct {
		prefix, alias, aggregate string
		kind                     Kind
		want                     string
	}{
		{"wow.", "example", "cart", KindCommand, "wow.example.cart.command"},
		{"wow.", "tck", "mock_aggregate", KindCommand, "wow.tck.mock_aggregate.command"}, // Wow's DefaultCommandTopicConverterTest
		{"wow.", "example", "order", KindEvent, "wow.example.order.event"},
		{"", "wow.command", "x", KindState, "wow.command.x.state"},
	}
	for _, tt := range tests {
		if got := Topic(tt.prefix, tt.alias, tt.aggregate, tt.kind); got != tt.want {
			t.Errorf("Topic(%q, %q, %q, %v) = %q, want %q", tt.prefix, tt.alias, tt.aggregate, tt.kind, got, tt.want)
		}
	}
}
