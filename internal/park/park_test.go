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

// An aggregate ID that is not valid UTF-8 (a raw dispatcher's binary record
// key) survives its state's and its request's round trip through the state
// topic. JSON replaced its bytes with U+FFFD, so the record no longer
// matched its key and was read back as bad: the partition's next owner did
// not know the aggregate parked and handled its later messages past the
// parked ones. An ID that is valid UTF-8 encodes as before.
func TestAnAggregateIDOfAnyBytesRoundTrips(t *testing.T) {
	for _, id := range []string{"cart-\xff", "\x00\x01\xfe", "a\xc3"} {
		s := &State{Service: "svc", Dispatcher: "d", Topic: "t", Partition: 2, Offset: 5, Aggregate: id, Epoch: 3}
		got, err := Unmarshal([]byte(s.RecordKey()), s.Marshal())
		if err != nil || got.Aggregate != id {
			t.Fatalf("state of %q: read back as %+v, %v", id, got, err)
		}
		asked := *s
		asked.Request = &Request{Action: Redrive, By: "op", ID: "r1"}
		got, err = Unmarshal([]byte(RequestKey(s.Topic, id, "r1")), asked.Marshal())
		if err != nil || got.Aggregate != id || got.Request == nil {
			t.Fatalf("request on %q: read back as %+v, %v", id, got, err)
		}
	}
	s := &State{Topic: "t", Aggregate: "cart-é"}
	if b := s.Marshal(); bytes.Contains(b, []byte("aggregate_bytes")) {
		t.Fatalf("a UTF-8 ID is written twice: %s", b)
	}
}

// A request whose action this version does not know (a later version's,
// or one written by hand) is read as a bad record: it was carried out as a
// redrive, and its action became a label value of
// wowd_parked_actions_total. Found by review.
func TestARequestOfAnUnknownActionIsRefused(t *testing.T) {
	s := State{Service: "svc", Dispatcher: "d", Topic: "t", Partition: 0, Offset: -1, Aggregate: "a",
		Request: &Request{Action: "retry", By: "op", ID: "r1"}}
	if got, err := Unmarshal([]byte(RequestKey("t", "a", "r1")), s.Marshal()); err == nil {
		t.Fatalf("a request of action %q read as %+v", "retry", got.Request)
	}
	for _, action := range []string{Park, Redrive, Skip, Discard} {
		s.Request.Action = action
		if _, err := Unmarshal([]byte(RequestKey("t", "a", "r1")), s.Marshal()); err != nil {
			t.Errorf("%s: %v", action, err)
		}
	}
}
