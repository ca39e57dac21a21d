package metrics

import "testing"

// TestCatalogCoversTheDesignNames checks the names DESIGN.md fixes.
func TestCatalogCoversTheDesignNames(t *testing.T) {
	have := map[string]Doc{}
	for _, d := range Catalog() {
		have[d.Name] = d
	}
	for _, name := range []string{"wowd_receiver_in_flight", "wowd_receiver_max_in_flight", "wowd_receiver_paused",
		"wowd_messages_total", "wowd_handler_duration_seconds", "wowd_executor_workers", "wowd_executor_mailboxes",
		"wowd_commit_lag_records"} {
		if _, ok := have[name]; !ok {
			t.Errorf("catalog lacks %s", name)
		}
	}
	if d := have["wowd_messages_total"]; d.Type != "counter" || len(d.Labels) != 3 {
		t.Errorf("wowd_messages_total: %+v", d)
	}
	for _, d := range have {
		for _, l := range d.Labels {
			switch l {
			case "dispatcher", "context", "handler", "outcome", "result", "event", "state", "version", "action":
			default:
				t.Errorf("%s has label %q outside the bounded set", d.Name, l)
			}
		}
	}
}
