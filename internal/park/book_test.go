package park

import (
	"maps"
	"slices"
	"testing"
)

func st(aggregate string, partition int32, epoch, head int64) *State {
	return &State{Service: "svc", Dispatcher: "d", Topic: "t", Partition: partition, Aggregate: aggregate, Epoch: epoch, Head: Position{Offset: head}}
}

// apply feeds the book a record as the tail would: encoded and decoded
// (nil: a tombstone of key).
func apply(t *testing.T, b *Book, key string, s *State) {
	t.Helper()
	if s != nil {
		var err error
		if s, err = Unmarshal([]byte(key), s.Marshal()); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Apply(key, s); err != nil {
		t.Fatal(err)
	}
}

func ownerAt(t *testing.T, b *Book, partition int32, epoch int64) {
	t.Helper()
	rec := OwnerRecord("state", "svc", "d", "t", partition, epoch)
	s, err := Unmarshal(rec.Key, rec.Value)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Apply(string(rec.Key), s); err != nil {
		t.Fatal(err)
	}
}

func heads(b *Book) map[string]int64 {
	out := make(map[string]int64)
	for k, s := range b.All() {
		out[k] = s.Head.Offset
	}
	return out
}

// TestBookPassesOverLateWritesOfEarlierOwners: the owner epochs of book.go,
// in the order a state topic can hold them.
func TestBookPassesOverLateWritesOfEarlierOwners(t *testing.T) {
	b := NewBook()
	// Written before epochs existed, then adopted by the first owner.
	legacy := st("a", 0, 0, 10)
	apply(t, b, legacy.RecordKey(), legacy)
	if got := b.Parked("t", "a"); got == nil || got.Head.Offset != 10 {
		t.Fatalf("a legacy state: %+v", got)
	}
	if e := b.NextEpoch("t", 0, 3); e != 3<<generationShift {
		t.Fatalf("next epoch %d, want generation 3's first, %d", e, 3<<generationShift)
	}
	adopted := st("a", 0, 3, 10)
	apply(t, b, adopted.RecordKey(), adopted)
	ownerAt(t, b, 0, 3)
	parked, old := b.Partition("t", 0)
	if len(parked) != 1 || parked[0].Epoch != 3 || !slices.Equal(old, []string{"t/a"}) {
		t.Fatalf("partition 0: parked %+v, old %v; want a at epoch 3 and the legacy key to delete", parked, old)
	}
	apply(t, b, "t/a", nil)

	// Epoch 3's owner lost the partition; epoch 4's took it over and
	// parked b. Epoch 3's late writes: a's progress, a's unpark, and a
	// parking of c.
	adopted4 := st("a", 0, 4, 10)
	apply(t, b, adopted4.RecordKey(), adopted4)
	ownerAt(t, b, 0, 4)
	b4 := st("b", 0, 4, 20)
	apply(t, b, b4.RecordKey(), b4)
	lateProgress := st("a", 0, 3, 99)
	apply(t, b, lateProgress.RecordKey(), lateProgress)
	apply(t, b, adopted.RecordKey(), nil) // a late unpark of epoch 3
	lateC := st("c", 0, 3, 30)
	apply(t, b, lateC.RecordKey(), lateC)
	if got, want := heads(b), map[string]int64{"t/a": 10, "t/b": 20}; !maps.Equal(got, want) {
		t.Fatalf("parked heads %v, want %v", got, want)
	}
	if b.Parked("t", "c") != nil {
		t.Fatal("c parked by a late write")
	}
	// Epoch 3's owner record, late too, does not lower the fence.
	ownerAt(t, b, 0, 3)
	if b.Parked("t", "c") != nil {
		t.Fatal("c parked once epoch 3's late owner record came")
	}
	// Another partition's owner epoch fences nothing of partition 0.
	ownerAt(t, b, 1, 9)
	if b.Parked("t", "a") == nil {
		t.Fatal("a fenced by partition 1's owner")
	}
	if e := b.NextEpoch("t", 0, 0); e != 5 {
		t.Fatalf("next epoch %d, want 5: above every epoch of the partition, whatever the generation", e)
	}
	parked, old = b.Partition("t", 0)
	slices.Sort(old)
	if want := []string{"!owner/t/0#3", "t#3/c"}; len(parked) != 2 || !slices.Equal(old, want) {
		t.Fatalf("partition 0: parked %d, old %v; want a and b, and %v to delete", len(parked), old, want)
	}
	// The next owner deletes them; a delete of epoch 3's owner record (or
	// a late one) does not lift epoch 4's fence.
	apply(t, b, OwnerKey("t", 0, 3), nil)
	apply(t, b, "t#3/c", nil)
	apply(t, b, lateC.RecordKey(), lateC)
	if b.Parked("t", "c") != nil {
		t.Fatal("c parked after epoch 3's owner record was deleted")
	}
	// The current owner unparks b.
	apply(t, b, b4.RecordKey(), nil)
	if b.Parked("t", "b") != nil {
		t.Fatal("b still parked after its delete")
	}
}

// TestOwnersOfTwoGenerationsTakeDifferentEpochs: a partition taken three
// times within generation 7 (a rewind, a stale incarnation taken again)
// holds epochs above 7. A member of generation 7 whose write is late and
// the owner of generation 8, both reading that book, must still take
// different epochs, the later generation's the higher: with equal epochs
// their states would replace each other's under the same keys.
func TestOwnersOfTwoGenerationsTakeDifferentEpochs(t *testing.T) {
	b := NewBook()
	e := b.NextEpoch("t", 0, 7)
	for range 3 {
		ownerAt(t, b, 0, e)
		e = b.NextEpoch("t", 0, 7)
	}
	late, next := b.NextEpoch("t", 0, 7), b.NextEpoch("t", 0, 8)
	if late >= next {
		t.Fatalf("generation 7 takes epoch %d, generation 8 %d: want the later generation's above", late, next)
	}
	if late != 7<<generationShift+3 {
		t.Fatalf("generation 7's fourth ownership takes epoch %d, want %d", late, 7<<generationShift+3)
	}
}

// TestBookRequests: requests have keys of their own, and are deleted by
// theirs: a delete of one acted on, however late, leaves a request written
// after it pending. Requests of an earlier version (one key per aggregate)
// are read and deleted by that key.
func TestBookRequests(t *testing.T) {
	b := NewBook()
	ask := func(id, action string) *State {
		req := st("a", 2, 1, 0)
		req.Request = &Request{Action: action, By: "me", ID: id}
		return req
	}
	legacy := ask("0", Redrive)
	apply(t, b, RequestKey("t", "a", ""), legacy)
	if got := b.Request("t", "a"); got == nil || got.Request.ID != "0" {
		t.Fatalf("request of an earlier version %+v", got)
	}
	apply(t, b, RequestKey("t", "a", "1"), ask("1", Redrive))
	apply(t, b, RequestKey("t", "a", "2"), ask("2", Skip))
	if got := b.Request("t", "a"); got == nil || got.Request.ID != "2" {
		t.Fatalf("request %+v, want the last written, 2", got)
	}
	if got := b.Requests("t", 2); len(got) != 1 || got[0].Request.ID != "2" {
		t.Fatalf("requests of partition 2: %v", got)
	}
	if got := b.AllRequests(); len(got) != 1 || got[Key("t", "a")].Request.ID != "2" {
		t.Fatalf("all requests: %v", got)
	}
	if b.Parked("t", "a") != nil {
		t.Fatal("a request parked its aggregate")
	}
	// The owner acted on 1: it deletes 1 and the request before it, never 2.
	keys := b.RequestKeys("t", "a", "1")
	if want := []string{RequestKey("t", "a", ""), RequestKey("t", "a", "1")}; !slices.Equal(keys, want) {
		t.Fatalf("keys answered by 1: %q, want %q", keys, want)
	}
	for _, k := range keys {
		apply(t, b, k, nil)
	}
	if got := b.Request("t", "a"); got == nil || got.Request.ID != "2" {
		t.Fatalf("after 1's delete the pending request is %+v, want 2", got)
	}
	// A late delete of 1 changes nothing; 2 is asked a third time.
	apply(t, b, RequestKey("t", "a", "1"), nil)
	apply(t, b, RequestKey("t", "a", "3"), ask("3", Discard))
	if got := b.Request("t", "a"); got == nil || got.Request.ID != "3" {
		t.Fatalf("pending %+v, want 3", got)
	}
	if keys := b.RequestKeys("t", "a", "9"); keys != nil {
		t.Fatalf("keys answered by a request not pending: %q", keys)
	}
	for _, k := range b.RequestKeys("t", "a", "3") {
		apply(t, b, k, nil)
	}
	if got := b.Request("t", "a"); got != nil || len(b.AllRequests()) != 0 {
		t.Fatalf("request still pending after the deletes: %+v", got)
	}
}

// TestRequestKeys: the key of a request names its aggregate and request,
// and a request decodes only under its own key (or, written by an earlier
// version, its aggregate's).
func TestRequestKeys(t *testing.T) {
	s := &State{Topic: "t.x-y", Aggregate: "a/b#c", Request: &Request{Action: Redrive, ID: "k3x"}}
	for _, key := range []string{RequestKey(s.Topic, s.Aggregate, "k3x"), RequestKey(s.Topic, s.Aggregate, "")} {
		topic, _, agg, err := ParseRequestKey(key)
		if err != nil || topic != s.Topic || agg != s.Aggregate {
			t.Fatalf("%q parsed as %q, %q, %v", key, topic, agg, err)
		}
		if got, err := Unmarshal([]byte(key), s.Marshal()); err != nil || got.Request.ID != "k3x" {
			t.Fatalf("request under %q: %+v, %v", key, got, err)
		}
	}
	if _, err := Unmarshal([]byte(RequestKey(s.Topic, s.Aggregate, "other")), s.Marshal()); err == nil {
		t.Fatal("a request decoded under another request's key")
	}
	// An ID with '/' would make two requests share a key: "t#p/q/r" is
	// ("q/r", ID "p") and ("r", ID "p/q").
	odd := &State{Topic: "t", Aggregate: "r", Request: &Request{Action: Skip, ID: "p/q"}}
	if _, err := Unmarshal([]byte(RequestKey(odd.Topic, odd.Aggregate, odd.Request.ID)), odd.Marshal()); err == nil {
		t.Fatal("a request with '/' in its ID decoded")
	}
}

func TestStateKeys(t *testing.T) {
	for _, c := range []struct {
		topic     string
		epoch     int64
		aggregate string
	}{{"t", 0, "a"}, {"t.x-y", 12, "a/b#c"}, {"t", 1, ""}} {
		key := StateKey(c.topic, c.epoch, c.aggregate)
		topic, epoch, aggregate, err := ParseStateKey(key)
		if err != nil || topic != c.topic || epoch != c.epoch || aggregate != c.aggregate {
			t.Fatalf("%q: %q %d %q %v, want %+v", key, topic, epoch, aggregate, err, c)
		}
	}
	for _, bad := range []string{"t", "/a", "t#x/a", "t#0/a", "t#-1/a"} {
		if _, _, _, err := ParseStateKey(bad); err == nil {
			t.Fatalf("%q parsed", bad)
		}
	}
	for _, bad := range []string{"t#x/a", "!owner/t/1", "!owner/t/x#1", "!owner/t/1#0", "!owner//1#2"} {
		if err := NewBook().Apply(bad, nil); err == nil {
			t.Fatalf("a tombstone with the bad key %q was taken", bad)
		}
	}
	o := OwnerRecord("state", "svc", "d", "t", 3, 7)
	if _, err := Unmarshal([]byte(OwnerKey("t", 4, 7)), o.Value); err == nil {
		t.Fatal("an owner record under another partition's key was taken")
	}
	s := st("a", 0, 5, 0)
	if _, err := Unmarshal([]byte(StateKey("t", 4, "a")), s.Marshal()); err == nil {
		t.Fatal("a state under another epoch's key was taken")
	}
}
