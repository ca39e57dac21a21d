package ingest

import (
	"encoding/json"
	"net/http"
	"testing"
)

// The answer's partition and offset say where the message is in Kafka: a
// refused message, which is nowhere, must not claim partition 0 offset 0,
// and a published one at partition 0 offset 0 must say so.
func TestTheAnswerNamesAPositionOnlyWhenPublished(t *testing.T) {
	in, _ := newIngest(&producer{})
	decode := func(body []byte) map[string]any {
		t.Helper()
		var v map[string]any
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatalf("answer %q: %v", body, err)
		}
		return v
	}
	w := send(in, []byte(message))
	if w.Code != http.StatusAccepted {
		t.Fatalf("published message: %d %s", w.Code, w.Body)
	}
	if v := decode(w.Body.Bytes()); v["partition"] != float64(0) || v["offset"] != float64(0) {
		t.Errorf("published at partition 0 offset 0, answered %s", w.Body)
	}
	w = send(in, []byte(`{"id":`))
	if w.Code != http.StatusBadRequest {
		t.Fatalf("malformed message: %d %s", w.Code, w.Body)
	}
	v := decode(w.Body.Bytes())
	for _, k := range []string{"partition", "offset"} {
		if _, ok := v[k]; ok {
			t.Errorf("refused message answered with %q: %s", k, w.Body)
		}
	}
}
