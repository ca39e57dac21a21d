// Package admission holds the local-first ingest: a co-located producer
// hands wowd a Wow message over HTTP; wowd admits it into its own mailboxes
// at once and publishes it to the message's topic marked as handled here, so
// that when it comes back through a receiver of this service it is
// acknowledged without being handled twice.
//
// The other admission decisions (runtime activity, local-first receipt of
// fetched records, decoding and routing) are made per record by the
// receivers, on the workers.
package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/receiver"
	"github.com/wowd/wowd/internal/wow"
)

// Path is the ingest endpoint; the message kind follows it:
// POST /v1/messages/{command|event|state}.
const Path = "/v1/messages/"

// MaxBody bounds an ingested message.
const MaxBody = 8 << 20

// Receiver is the part of a receiver the ingest needs.
type Receiver interface {
	Routes(topic string) bool
	Admit(ctx context.Context, rec *kgo.Record) error
}

// Producer publishes records; a franz-go client.
type Producer interface {
	ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults
}

// Context is a bounded context the ingest accepts messages of.
type Context struct {
	Alias      string
	Aggregates []string
}

// Ingest serves the ingest endpoint.
type Ingest struct {
	Service     string
	TopicPrefix string
	Contexts    map[string]Context // by context name
	Receivers   []Receiver
	Producer    Producer
	Log         *zap.Logger

	stopping atomic.Bool
}

// Stop makes the endpoint refuse new messages (503 with Retry-After).
func (in *Ingest) Stop() { in.stopping.Store(true) }

// response is the JSON answer to a request.
type response struct {
	Topic     string `json:"topic,omitempty"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Handled   int    `json:"admitted_by"` // receivers that admitted it locally
	Error     string `json:"error,omitempty"`
}

func reply(w http.ResponseWriter, status int, r response) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(r)
}

// ServeHTTP handles POST /v1/messages/{kind}.
func (in *Ingest) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		reply(w, http.StatusMethodNotAllowed, response{Error: "POST a Wow message"})
		return
	}
	if in.stopping.Load() {
		w.Header().Set("Retry-After", "5")
		reply(w, http.StatusServiceUnavailable, response{Error: "wowd is stopping"})
		return
	}
	kind, err := handler.ParseKind(strings.TrimPrefix(req.URL.Path, Path))
	if err != nil {
		reply(w, http.StatusNotFound, response{Error: "POST " + Path + "command, event or state: " + err.Error()})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, MaxBody))
	if err != nil {
		reply(w, http.StatusRequestEntityTooLarge, response{Error: fmt.Sprintf("reading the message: %v", err)})
		return
	}
	var m wow.Message
	if err := m.Decode(kind, body); err != nil {
		reply(w, http.StatusBadRequest, response{Error: err.Error()})
		return
	}
	bc, ok := in.Contexts[m.ContextName]
	if !ok || !contains(bc.Aggregates, m.AggregateName) {
		reply(w, http.StatusUnprocessableEntity, response{Error: fmt.Sprintf("aggregate %s of context %s is not configured", m.AggregateName, m.ContextName)})
		return
	}
	topic := wow.Topic(in.TopicPrefix, bc.Alias, m.AggregateName, kind)
	local := &kgo.Record{Topic: topic, Key: []byte(m.AggregateID), Value: body, Timestamp: time.Now()}
	admitted := 0
	for _, r := range in.Receivers {
		if !r.Routes(topic) {
			continue
		}
		// Waiting here for room in the receiver's window is the caller's
		// backpressure.
		if err := r.Admit(req.Context(), local); err != nil {
			status := http.StatusServiceUnavailable
			if errors.Is(err, receiver.ErrStopping) {
				w.Header().Set("Retry-After", "5")
			}
			reply(w, status, response{Handled: admitted, Error: fmt.Sprintf("admitting: %v", err)})
			return
		}
		admitted++
	}
	value, err := markLocalFirst(body)
	if err != nil {
		reply(w, http.StatusBadRequest, response{Error: err.Error()})
		return
	}
	out := &kgo.Record{Topic: topic, Key: []byte(m.AggregateID), Value: value,
		Headers: []kgo.RecordHeader{{Key: receiver.HeaderHandledBy, Value: []byte(in.Service)}}}
	if m.CreateTime > 0 {
		out.Timestamp = time.UnixMilli(m.CreateTime)
	}
	res := in.Producer.ProduceSync(req.Context(), out)
	if err := res.FirstErr(); err != nil {
		in.Log.Error("publishing an ingested message failed after it was admitted locally",
			zap.String("topic", topic), zap.String("aggregate_id", m.AggregateID), zap.Error(err))
		reply(w, http.StatusBadGateway, response{Topic: topic, Handled: admitted,
			Error: fmt.Sprintf("admitted locally by %d receivers, but publishing to %s failed: %v", admitted, topic, err)})
		return
	}
	rec := res[0].Record
	w.Header().Set("Location", topic+"/"+strconv.Itoa(int(rec.Partition))+"/"+strconv.FormatInt(rec.Offset, 10))
	reply(w, http.StatusAccepted, response{Topic: topic, Partition: rec.Partition, Offset: rec.Offset, Handled: admitted})
}

// markLocalFirst sets the Wow header local_first to "true" in a message,
// keeping every other value as written.
func markLocalFirst(value []byte) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(value, &top); err != nil {
		return nil, fmt.Errorf("marking local_first: %w", err)
	}
	header := map[string]string{}
	if raw, ok := top["header"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &header); err != nil {
			return nil, fmt.Errorf("marking local_first: header: %w", err)
		}
	}
	header[wow.HeaderLocalFirst] = "true"
	raw, err := json.Marshal(header)
	if err != nil {
		return nil, fmt.Errorf("marking local_first: %w", err)
	}
	top["header"] = raw
	return json.Marshal(top)
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
