package config_test

import (
	"strings"
	"testing"
)

// TestReceiverNamesAreUnique: two receivers in one consumer group split the
// group's partitions between their handlers, so each handler sees only part
// of the stream; two clients with one client ID make the second client's
// metrics registration fail. Both are refused, naming both receivers.
func TestReceiverNamesAreUnique(t *testing.T) {
	const head = "wow:\n  service: s\n  kafka:\n    bootstrap-servers: [k:9092]\n"
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"explicit group-id", head + `  contexts:
    c:
      aggregates: [a]
  dispatchers:
    one:
      topics: [event]
      group-id: shared
      handler: {type: log}
    two:
      topics: [event]
      group-id: shared
      handler: {type: log}
`, []string{`wow.dispatchers.two.group-id: consumer group "shared" of the receiver for context c is also the group of dispatcher one's receiver for context c`}},
		{"default group IDs through dots", head + `  contexts:
    b.c:
      aggregates: [x]
    c:
      aggregates: [y]
  dispatchers:
    a:
      topics: [event]
      contexts: [b.c]
      handler: {type: log}
    a.b:
      topics: [event]
      contexts: [c]
      handler: {type: log}
`, []string{`wow.dispatchers.a.b: consumer group "s.a.b.c" of the receiver for context c is also the group of dispatcher a's receiver for context b.c`}},
		{"explicit group-id against a default one", head + `  contexts:
    c:
      aggregates: [a]
  dispatchers:
    one:
      topics: [event]
      handler: {type: log}
    two:
      topics: [event]
      group-id: s.one.c
      handler: {type: log}
`, []string{`wow.dispatchers.two.group-id: consumer group "s.one.c" of the receiver for context c is also the group of dispatcher one's receiver for context c`}},
		{"client IDs through dashes", head + `  contexts:
    b-c:
      aggregates: [x]
    c:
      alias: c
      aggregates: [y]
  dispatchers:
    a:
      topics: [event]
      contexts: [b-c]
      handler: {type: log}
    a-b:
      topics: [event]
      contexts: [c]
      handler: {type: log}
`, []string{`wow.dispatchers.a-b: Kafka client ID "wowd-a-b-c" of the receiver for context c is also the client ID of dispatcher a's receiver for context b-c`}},
		{"parking client ID", head + `  contexts:
    c-parking:
      aggregates: [x]
    c:
      aggregates: [y]
  dispatchers:
    a:
      topics: [event]
      handler: {type: log}
`, []string{`wow.dispatchers.a: Kafka client ID "wowd-a-c-parking" of the receiver for context c-parking is also the parking client ID of dispatcher a's receiver for context c`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := parseErrors(t, tt.yaml)
			for _, want := range tt.want {
				if !strings.Contains(errs.Error(), want) {
					t.Errorf("errors:\n%s\nwant one containing %q", errs, want)
				}
			}
			if len(errs.List) != len(tt.want) {
				t.Errorf("got %d errors, want %d:\n%s", len(errs.List), len(tt.want), errs)
			}
		})
	}
}

// TestReceiverNames: the names the daemon gives each receiver's consumer
// group and clients.
func TestReceiverNames(t *testing.T) {
	c := mustParse(t, minimalYAML+"    single:\n      topics: [event]\n      contexts: [mid]\n      group-id: g\n      handler: {type: log}\n"+
		"    several:\n      topics: [event]\n      contexts: [mid, alpha]\n      group-id: h\n      handler: {type: log}\n")
	for _, tt := range []struct{ got, want string }{
		{c.GroupID("all", "shop.alpha"), "audit.all.shop.alpha"},
		{c.GroupID("single", "mid"), "g"},
		{c.GroupID("several", "mid"), "h.mid"},
		{c.ClientID("all", "shop.alpha"), "wowd-all-shop.alpha"},
		{c.ParkingClientID("all", "mid"), "wowd-all-mid-parking"},
		{c.IngestClientID(), "wowd-ingest"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}
