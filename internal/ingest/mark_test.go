package ingest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
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

// TestAMessageNotInUTF8IsRefused: JSON text is UTF-8 (RFC 8259), and Wow
// writes and reads its messages so: Jackson refuses a value with other
// bytes, and Wow's default decode-failure handler then stops the receive
// stream of every Wow service consuming the topic. A message with a byte
// that is not UTF-8 is answered 400 and neither admitted nor published.
// Before, it was accepted (202), and its published copy was not even what
// was handled here: marking it merged two keys the bytes told apart, and
// wrote U+FFFD for the stray bytes of the header.
func TestAMessageNotInUTF8IsRefused(t *testing.T) {
	bad := strings.Replace(message, `"header":{}`, "\"header\":{\"trace_id\":\"t\xff\"},\"x\xff\":1,\"x\xfe\":2", 1)
	for name, body := range map[string]string{
		"header": bad,
		"body":   strings.Replace(message, `"n":1`, "\"n\":\"\xc3\"", 1),
	} {
		p := &producer{}
		in, m := newIngest(p)
		w := send(in, []byte(body))
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "UTF-8") {
			t.Errorf("%s: answered %d (%s), want 400 naming UTF-8", name, w.Code, w.Body)
		}
		if n := p.published(); n != 0 {
			t.Errorf("%s: %d records published", name, n)
		}
		if n := counted(t, m, "rejected"); n != 1 {
			t.Errorf("%s: counted %v as rejected, want 1", name, n)
		}
	}
	p := &producer{}
	in, _ := newIngest(p)
	if w := send(in, []byte(strings.Replace(message, `"n":1`, `"n":"\u00e9 é \ud83d\ude00"`, 1))); w.Code != http.StatusAccepted {
		t.Errorf("a message in UTF-8 answered %d (%s)", w.Code, w.Body)
	}
}
