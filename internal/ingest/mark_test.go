package ingest

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestMarkLocalFirstKeepsTheMessagesBytes: marking a message local_first
// adds the header and changes no string of it: <, > and & stay as sent
// (json.Marshal would escape them as \u003c and the like, six bytes each:
// a message checked to fit its topic would grow, and its consumers would
// read other bytes than the caller sent).
func TestMarkLocalFirstKeepsTheMessagesBytes(t *testing.T) {
	in := []byte(`{"id":"a<b>&c","header":{"x":"<y>"},"body":[{"name":"n","body":{"html":"<p>&amp;</p>"}}]}`)
	out, err := markLocalFirst(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"a<b>&c"`, `"x":"<y>"`, `"html":"<p>&amp;</p>"`, `"local_first":"true"`} {
		if !bytes.Contains(out, []byte(s)) {
			t.Errorf("marked message lacks %s: %s", s, out)
		}
	}
	if grew, mark := len(out)-len(in), len(`,"local_first":"true"`); grew != mark {
		t.Errorf("marked message grew by %d bytes, want %d (the mark alone): %s", grew, mark, out)
	}
	var v map[string]any
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("marked message does not decode: %v: %s", err, out)
	}
}
