package wow

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"math/big"
	"slices"
	"strings"
	"testing"
)

// FuzzDecode decodes arbitrary values as each kind and checks that Decode
// never panics, is deterministic, and agrees with encoding/json: it fails on
// exactly the values that are not JSON, and on valid JSON it succeeds
// exactly when the fields have the types the package documentation
// requires, with the same values.
func FuzzDecode(f *testing.F) {
	for _, fx := range loadFixtures(f) {
		if v := fx.value(f); len(v) <= 16<<10 {
			f.Add(uint8(fx.kind(f)), v)
		}
	}
	for _, seed := range []string{
		`{"id":"i","contextName":"c","aggregateName":"a","aggregateId":"k","name":"n","header":{"a":"b"}}`,
		`{"id":"i","contextName":"c","aggregateName":"a","aggregateId":"k","body":[{"name":"e"}],"version":1e0}`,
		`{"aggregate\u0049d":"\ud83d\ude00","id":"\ud800","contextName":"c","aggregateName":"a","body":[]}`,
		"{\"id\":\"\xff\",\"contextName\":\"c\",\"aggregateName\":\"a\",\"aggregateId\":\"k\",\"name\":\"n\",\"header\":{\"\xfe\":1,\"\xff\":\"v\"}}",
	} {
		for k := range uint8(3) {
			f.Add(k+1, []byte(seed))
		}
	}
	f.Fuzz(func(t *testing.T, k uint8, value []byte) {
		kind := Kind(k%3 + 1)
		var m Message
		err := m.Decode(kind, value)

		// Deterministic, with a new Message and with a reused one.
		var fresh Message
		ferr := fresh.Decode(kind, value)
		if errText(err) != errText(ferr) || !sameMessage(&m, &fresh) {
			t.Fatalf("decoded twice: %v / %v\n%+v\n%+v", err, ferr, m, fresh)
		}
		if rerr := m.Decode(kind, value); errText(rerr) != errText(err) || !sameMessage(&m, &fresh) {
			t.Fatalf("decoded again into the same Message: %v / %v", rerr, err)
		}
		var de *DecodeError
		if err != nil && !errors.As(err, &de) {
			t.Fatalf("error %v is a %T", err, err)
		}

		valid := json.Valid(value)
		if !valid {
			if err == nil || !de.Syntax {
				t.Fatalf("encoding/json rejects %q, Decode gives %v", value, err)
			}
			return
		}
		if err != nil && de.Syntax {
			t.Fatalf("encoding/json accepts %q, Decode gives %v", value, err)
		}
		want, reason := expect(kind, value)
		switch {
		case reason == indeterminate:
		case reason != "" && err == nil:
			t.Fatalf("Decode accepts %q, which the oracle rejects: %s", value, reason)
		case reason == "" && err != nil:
			t.Fatalf("Decode rejects %q: %v", value, err)
		case reason == "":
			want.compare(t, &m)
		}
	})
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func sameMessage(a, b *Message) bool {
	return a.Kind == b.Kind && a.ID == b.ID && a.Name == b.Name && a.ContextName == b.ContextName &&
		a.AggregateName == b.AggregateName && a.AggregateID == b.AggregateID && a.TenantID == b.TenantID &&
		a.RequestID == b.RequestID && a.CommandID == b.CommandID && a.Version == b.Version &&
		a.HasVersion == b.HasVersion && a.CreateTime == b.CreateTime &&
		slices.Equal(a.Header, b.Header) && slices.Equal(a.Events, b.Events)
}

// oracleMessage is what the oracle expects Decode to give.
type oracleMessage struct {
	strs       map[string]string // JSON field name → value
	version    *big.Int
	createTime *big.Int
	header     map[string]string
	events     []string
}

// indeterminate is the reason expect gives when it cannot tell cheaply.
const indeterminate = "indeterminate"

// expect decodes value (valid JSON) with encoding/json and applies the
// rules of the package documentation. It returns the expected message, or
// why Decode must fail.
func expect(kind Kind, value []byte) (*oracleMessage, string) {
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.UseNumber() // numbers of any size, as text
	var top any
	if err := dec.Decode(&top); err != nil {
		return nil, "encoding/json: " + err.Error()
	}
	obj, ok := top.(map[string]any)
	if !ok {
		return nil, "not an object"
	}
	want := &oracleMessage{strs: map[string]string{}}
	required := []string{"id", "contextName", "aggregateName", "aggregateId"}
	optional := []string{"tenantId", "requestId"}
	versionKey := "version"
	if kind == KindCommand {
		required = append(required, "name")
		versionKey = "aggregateVersion"
	} else {
		optional = append(optional, "commandId")
	}
	for _, key := range required {
		s, ok := obj[key].(string)
		if !ok {
			return nil, key + " is not a string"
		}
		want.strs[key] = s
	}
	if want.strs["aggregateId"] == "" {
		return nil, "aggregateId is empty"
	}
	for _, key := range optional {
		switch v := obj[key].(type) {
		case nil:
		case string:
			want.strs[key] = v
		default:
			return nil, key + " is not a string"
		}
	}
	for key, dst := range map[string]**big.Int{versionKey: &want.version, "createTime": &want.createTime} {
		switch v := obj[key].(type) {
		case nil:
		case json.Number:
			n, reason := exactInt(string(v))
			if reason != "" {
				return nil, reason
			}
			*dst = n
		default:
			return nil, key + " is not a number"
		}
	}
	switch h := obj["header"].(type) {
	case nil:
	case map[string]any:
		want.header = map[string]string{}
		for k, v := range h {
			s, ok := v.(string)
			if !ok {
				return nil, "header " + k + " is not a string"
			}
			want.header[k] = s
		}
	default:
		return nil, "header is not an object"
	}
	if kind != KindCommand {
		body, ok := obj["body"].([]any)
		if !ok {
			return nil, "body is not an array"
		}
		for _, e := range body {
			ev, ok := e.(map[string]any)
			if !ok {
				return nil, "an event is not an object"
			}
			name, ok := ev["name"].(string)
			if !ok {
				return nil, "an event name is not a string"
			}
			want.events = append(want.events, name)
		}
	}
	if kind == KindState {
		if _, ok := obj["state"].(map[string]any); !ok {
			return nil, "state is not an object"
		}
		if _, ok := obj["deleted"]; !ok {
			return nil, "no deleted"
		}
	}
	return want, ""
}

// exactInt returns the value of a JSON number if it is an integer in the
// int64 range, exactly, with math/big.
func exactInt(text string) (*big.Int, string) {
	if i := strings.IndexAny(text, "eE"); i >= 0 && len(strings.TrimLeft(text[i+1:], "+-0")) > 4 {
		return nil, indeterminate // 10^(huge): too slow for big.Rat
	}
	r, ok := new(big.Rat).SetString(text)
	if !ok {
		return nil, "bad number " + text
	}
	if !r.IsInt() {
		return nil, text + " is not an integer"
	}
	if n := r.Num(); n.IsInt64() {
		return n, ""
	}
	return nil, text + " is out of range"
}

func (w *oracleMessage) compare(t *testing.T, m *Message) {
	t.Helper()
	got := map[string]string{
		"id": m.ID, "contextName": m.ContextName, "aggregateName": m.AggregateName,
		"aggregateId": m.AggregateID, "tenantId": m.TenantID, "requestId": m.RequestID,
	}
	if m.Kind == KindCommand {
		got["name"] = m.Name
	} else {
		got["commandId"] = m.CommandID
	}
	for k, v := range got {
		if v != w.strs[k] {
			t.Errorf("%s = %q, encoding/json has %q", k, v, w.strs[k])
		}
	}
	if (w.version != nil) != m.HasVersion || w.version != nil && w.version.Int64() != m.Version {
		t.Errorf("Version = %d (%v), encoding/json has %v", m.Version, m.HasVersion, w.version)
	}
	if w.createTime != nil && w.createTime.Int64() != m.CreateTime || w.createTime == nil && m.CreateTime != 0 {
		t.Errorf("CreateTime = %d, encoding/json has %v", m.CreateTime, w.createTime)
	}
	header := map[string]string{}
	for _, h := range m.Header {
		if _, dup := header[h.Key]; dup {
			t.Errorf("header %q twice", h.Key)
		}
		header[h.Key] = h.Value
	}
	if !maps.Equal(header, w.header) && len(header)+len(w.header) > 0 {
		t.Errorf("Header = %q, encoding/json has %q", header, w.header)
	}
	if !slices.Equal(m.Events, w.events) {
		t.Errorf("Events = %q, encoding/json has %q", m.Events, w.events)
	}
}
