package ingest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/bearer"
	"github.com/wowd/wowd/internal/receiver"
	"github.com/wowd/wowd/internal/wow"
)

// fakeProducer records what it is asked to publish and says it published
// it at partition 0, offset 0.
type fakeProducer struct {
	mu  sync.Mutex // guards got
	got []*kgo.Record
}

func (p *fakeProducer) ProduceSync(_ context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(kgo.ProduceResults, len(rs))
	for i, r := range rs {
		p.got = append(p.got, r)
		out[i] = kgo.ProduceResult{Record: r}
	}
	return out
}

func (p *fakeProducer) take() []*kgo.Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	got := p.got
	p.got = nil
	return got
}

// elsewhere is a receiver that consumes none of the ingest's topics.
type elsewhere struct{ admitted int }

func (*elsewhere) Dispatcher() string { return "elsewhere" }
func (*elsewhere) Routes(string) bool { return false }
func (*elsewhere) Published(string, string, int32, int64) {
	panic("told of a copy of a topic it does not consume")
}
func (*elsewhere) Refused(string, string) { panic("told of a copy of a topic it does not consume") }
func (*elsewhere) NotPublished(string, string) {
	panic("told of a copy of a topic it does not consume")
}
func (e *elsewhere) Admit(context.Context, *kgo.Record) (receiver.Admitted, error) {
	e.admitted++
	return receiver.Admitted{}, errors.New("not consumed here")
}

const fuzzToken = "s3cret-t0ken"

// FuzzRequest serves arbitrary HTTP requests (raw bytes as a client sends
// them, with or without a bearer token configured) and checks that the
// endpoint never panics; answers 202 having published exactly one record,
// the Wow message as posted, to a configured aggregate's topic, or
// else a 4xx with a JSON error having published nothing; and answers 401
// to every request without the token when one is configured.
func FuzzRequest(f *testing.F) {
	post := func(path, auth, body string) string {
		h := "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
		if auth != "" {
			h += "Authorization: " + auth + "\r\n"
		}
		return h + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}
	const event = `{"id":"e1","contextName":"example-service","aggregateName":"cart","aggregateId":"c-1","version":1,` +
		`"header":{"trace_id":"t"},"body":[{"name":"added","body":{}}],"createTime":1755868563012}`
	const command = `{"id":"c1","contextName":"example-service","aggregateName":"cart","aggregateId":"c-1","name":"add","body":{}}`
	for _, seed := range []string{
		post(Path+"event", "", event),
		post(Path+"command", "Bearer "+fuzzToken, command),
		"GET /v1/messages/event HTTP/1.1\r\nHost: x\r\n\r\n",
		post(Path+"nothing", "", "{}"),
	} {
		f.Add(false, []byte(seed))
		f.Add(true, []byte(seed))
	}
	tokenFile := filepath.Join(f.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(fuzzToken+"\n"), 0o600); err != nil {
		f.Fatal(err)
	}
	tok, err := bearer.Open(tokenFile, "ingest", zap.NewNop())
	if err != nil {
		f.Fatal(err)
	}
	contexts := map[string]wow.Context{"example-service": {Alias: "example", Aggregates: []string{"cart", "order"}}}
	topics := map[string]bool{}
	for _, agg := range contexts["example-service"].Aggregates {
		for _, k := range []handler.Kind{handler.KindCommand, handler.KindEvent, handler.KindState} {
			topics[wow.Topic("wow.", "example", agg, k)] = true
		}
	}
	f.Fuzz(func(t *testing.T, withToken bool, raw []byte) {
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return // net/http answers 400 before any handler
		}
		body, err := io.ReadAll(req.Body) // what a 202 must publish as it is
		if err != nil {
			return // a body shorter than its length: net/http answers 400
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		prod, other := &fakeProducer{}, &elsewhere{}
		in := &Ingest{Service: "carts", TopicPrefix: "wow.", Contexts: contexts, Receivers: []Receiver{other},
			Producer: prod, Log: zap.NewNop()}
		if withToken {
			in.Token = tok
		}
		allowed := !withToken || tok.Allows(req)
		rec := httptest.NewRecorder()
		in.ServeHTTP(rec, req)

		published := prod.take()
		code := rec.Code
		var resp response
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
			t.Fatalf("status %d: the answer is not JSON: %v: %q", code, err, rec.Body.String())
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
		if other.admitted > 0 {
			t.Errorf("admitted to a receiver that does not consume the topic")
		}
		switch {
		case !allowed && code != http.StatusUnauthorized:
			t.Fatalf("no token, answered %d", code)
		case code == http.StatusAccepted:
			if len(published) != 1 {
				t.Fatalf("202 with %d records published", len(published))
			}
			r := published[0]
			if !topics[r.Topic] || resp.Topic != r.Topic {
				t.Fatalf("published to %q (answered %q), not a configured topic", r.Topic, resp.Topic)
			}
			kind, err := handler.ParseKind(strings.TrimPrefix(req.URL.Path, Path))
			if err != nil {
				t.Fatalf("202 for path %q: %v", req.URL.Path, err)
			}
			var m wow.Message
			if err := m.Decode(kind, r.Value); err != nil {
				t.Fatalf("published a record that is not a Wow %s: %v", kind, err)
			}
			if !bytes.Equal(r.Value, body) || string(r.Key) != m.AggregateID {
				t.Fatalf("published record: value %q (posted %q), key %q, aggregate id %q", r.Value, body, r.Key, m.AggregateID)
			}
		case code == http.StatusRequestEntityTooLarge && req.ContentLength <= MaxBody:
			t.Fatalf("answered 413 to a body of %d bytes (at most %d): %s", req.ContentLength, MaxBody, resp.Error)
		case code >= 400 && code < 500:
			if len(published) > 0 {
				t.Fatalf("answered %d but published %d records", code, len(published))
			}
			if resp.Error == "" {
				t.Fatalf("answered %d without saying why", code)
			}
		default:
			t.Fatalf("answered %d (%s) to a request the fakes cannot fail", code, resp.Error)
		}
	})
}

// TestBodyStatus holds what FuzzRequest found: a body cut short is a bad
// request (400), not one too large (413), which only a body over MaxBody
// is; neither publishes anything.
func TestBodyStatus(t *testing.T) {
	const event = `{"id":"e1","contextName":"c","aggregateName":"cart","aggregateId":"c-1","body":[]}`
	for _, tc := range []struct {
		name   string
		body   string
		length int
		want   int
	}{
		{"cut short", event, len(event) + 10, http.StatusBadRequest},
		{"too large", strings.Repeat(" ", MaxBody+1), MaxBody + 1, http.StatusRequestEntityTooLarge},
	} {
		prod := &fakeProducer{}
		in := &Ingest{Service: "carts", TopicPrefix: "wow.", Producer: prod, Log: zap.NewNop(),
			Contexts: map[string]wow.Context{"c": {Alias: "c", Aggregates: []string{"cart"}}}}
		raw := "POST " + Path + "event HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(tc.length) + "\r\n\r\n" + tc.body
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		in.ServeHTTP(rec, req)
		if rec.Code != tc.want || len(prod.take()) != 0 || !strings.Contains(rec.Body.String(), "reading the message") {
			t.Errorf("%s: answered %d (%s), want %d and nothing published", tc.name, rec.Code, rec.Body, tc.want)
		}
	}
}
