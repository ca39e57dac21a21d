package wow

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// wowStruct is what a struct-based decoder with encoding/json would read:
// the same fields as Message, the bodies skipped as raw JSON where it can.
type wowStruct struct {
	ID               string            `json:"id"`
	Name             string            `json:"name"`
	ContextName      string            `json:"contextName"`
	AggregateName    string            `json:"aggregateName"`
	AggregateID      string            `json:"aggregateId"`
	TenantID         string            `json:"tenantId"`
	RequestID        string            `json:"requestId"`
	CommandID        string            `json:"commandId"`
	Version          *int64            `json:"version"`
	AggregateVersion *int64            `json:"aggregateVersion"`
	CreateTime       int64             `json:"createTime"`
	Header           map[string]string `json:"header"`
	Body             json.RawMessage   `json:"body"`
	State            json.RawMessage   `json:"state"`
}

type eventNames []struct {
	Name string          `json:"name"`
	Body json.RawMessage `json:"body"`
}

// BenchmarkDecode compares Message.Decode with encoding/json decoding the
// same record into a map and into a struct, for each kind.
func BenchmarkDecode(b *testing.B) {
	records := []struct {
		name string
		kind Kind
		file string
	}{
		{"command", KindCommand, "command-add-cart-item.json"},
		{"event", KindEvent, "event-order-created-three-events.json"},
		{"state", KindState, "state-cart.json"},
		{"state-500KB", KindState, "state-large.json"},
	}
	for _, r := range records {
		value, err := os.ReadFile(filepath.Join("testdata", "records", r.file))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(r.name+"/wow", func(b *testing.B) {
			b.SetBytes(int64(len(value)))
			b.ReportAllocs()
			var m Message
			for b.Loop() {
				if err := m.Decode(r.kind, value); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(r.name+"/json-map", func(b *testing.B) {
			b.SetBytes(int64(len(value)))
			b.ReportAllocs()
			for b.Loop() {
				var m map[string]any
				if err := json.Unmarshal(value, &m); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(r.name+"/json-struct", func(b *testing.B) {
			b.SetBytes(int64(len(value)))
			b.ReportAllocs()
			for b.Loop() {
				var m wowStruct
				if err := json.Unmarshal(value, &m); err != nil {
					b.Fatal(err)
				}
				if r.kind != KindCommand {
					var names eventNames
					if err := json.Unmarshal(m.Body, &names); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
