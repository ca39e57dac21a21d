package park

import (
	"bytes"
	"testing"
)

// TestSkippedIsCompatible: a state written before Skipped existed decodes
// with it false, and a state without it encodes as before (an earlier
// version reads it unchanged); one with it keeps it through a decode.
func TestSkippedIsCompatible(t *testing.T) {
	old := `{"service":"svc","dispatcher":"d","topic":"t","partition":0,"offset":5,"aggregate":"a","head":{"partition":0,"offset":7},"since":"2024-01-02T03:04:05Z","class":"permanent","reason":"r","attempts":1,"epoch":3}`
	s, err := Unmarshal([]byte(StateKey("t", 3, "a")), []byte(old))
	if err != nil {
		t.Fatal(err)
	}
	if s.Skipped || s.Head.Offset != 7 {
		t.Fatalf("an earlier version's state decoded as %+v", s)
	}
	if b := s.Marshal(); bytes.Contains(b, []byte("skipped")) {
		t.Fatalf("a state not skipped encodes the field: %s", b)
	}
	s.Skipped = true
	got, err := Unmarshal([]byte(s.RecordKey()), s.Marshal())
	if err != nil || !got.Skipped {
		t.Fatalf("a skipped state decoded as %+v, %v", got, err)
	}
}
