package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	zapobserver "go.uber.org/zap/zaptest/observer"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
)

// TestLeastPrivilegeACLs runs wowd as a principal holding only the Kafka
// ACLs that docs/operations.md ("Least privilege in Kafka") lists: Read on
// its topics and (prefixed) groups, Write and Create on its dead-letter
// topics, Read, Write and Create on its parking topics, DescribeConfigs on
// its topics, dead-letter topics and parked topics, Write on its topics for
// ingest. With them it consumes and commits, creates its dead-letter
// and parking topics, writes a dead letter, parks an aggregate and
// publishes an ingested message; nothing it logs is a warning about a
// refused operation.
func TestLeastPrivilegeACLs(t *testing.T) {
	t.Run("the documented ACLs", func(t *testing.T) { leastPrivilege(t, true) })
	// The broker enforces them: without Create on the dead-letter topic,
	// wowd says it could not create it (and the test above would have
	// seen that warning).
	t.Run("without Create", func(t *testing.T) { leastPrivilege(t, false) })
}

func leastPrivilege(t *testing.T, create bool) {
	const (
		topic  = "wow.example.cart.event"
		dlq    = topic + ".dlq"
		parked = topic + ".parked"
		state  = "wowd-parked.carts.projection"
	)
	allow := func(res kmsg.ACLResourceType, name string, pat kmsg.ACLResourcePatternType, op kmsg.ACLOperation) kfake.ACL {
		return kfake.ACL{Resource: res, Name: name, Pattern: pat, Operation: op, Allow: true}
	}
	lit, pre := kmsg.ACLResourcePatternTypeLiteral, kmsg.ACLResourcePatternTypePrefixed
	acls := []kfake.ACL{
		allow(kmsg.ACLResourceTypeTopic, topic, lit, kmsg.ACLOperationRead),
		allow(kmsg.ACLResourceTypeGroup, "carts.", pre, kmsg.ACLOperationRead),
		allow(kmsg.ACLResourceTypeTopic, dlq, lit, kmsg.ACLOperationWrite),
		allow(kmsg.ACLResourceTypeTopic, topic, lit, kmsg.ACLOperationWrite), // ingest
		allow(kmsg.ACLResourceTypeTopic, parked, lit, kmsg.ACLOperationRead),
		allow(kmsg.ACLResourceTypeTopic, parked, lit, kmsg.ACLOperationWrite),
		allow(kmsg.ACLResourceTypeTopic, state, lit, kmsg.ACLOperationRead),
		allow(kmsg.ACLResourceTypeTopic, state, lit, kmsg.ACLOperationWrite),
		// The dead-letter and parked topics' sizes: their source's
		// limit, and their own; the consumed topic's limit also sizes
		// what ingest publishes.
		allow(kmsg.ACLResourceTypeTopic, topic, lit, kmsg.ACLOperationDescribeConfigs),
		allow(kmsg.ACLResourceTypeTopic, dlq, lit, kmsg.ACLOperationDescribeConfigs),
		allow(kmsg.ACLResourceTypeTopic, parked, lit, kmsg.ACLOperationDescribeConfigs),
	}
	if create {
		for _, tp := range []string{dlq, parked, state} {
			acls = append(acls, allow(kmsg.ACLResourceTypeTopic, tp, lit, kmsg.ACLOperationCreate))
		}
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic),
		kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser("PLAIN", "admin", "admin-pw"),
		kfake.User("PLAIN", "wowd", "wowd-pw", acls...))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	admin, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.SASL(plain.Auth{User: "admin", Pass: "admin-pw"}.AsMechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)

	cnt := &counter{n: map[string]int{}}
	var reg handler.Registry
	reg.Register(handler.Spec{Name: "count", New: func(any, handler.Deps) (handler.Handler, error) {
		return handler.Sync(func(_ context.Context, m *handler.Message) error {
			cnt.mu.Lock()
			cnt.n[m.Wow.ID]++
			cnt.mu.Unlock()
			if m.Wow.ID == "fails" {
				return handler.Classed(handler.Permanent, errors.New("fails for good"))
			}
			return nil
		}), nil
	}})
	cfg, err := config.Parse(fmt.Appendf(nil, `
wow:
  service: carts
  kafka:
    bootstrap-servers: [%s]
    commit-interval: 100ms
    heartbeat-interval: 200ms
    sasl: {mechanism: plain, username: wowd, password: wowd-pw}
  contexts:
    example-service:
      alias: example
      aggregates: [cart]
  dispatchers:
    projection:
      topics: [event]
      handler: {type: count}
  metrics:
    listen: 127.0.0.1:0
  ingest:
    enabled: true
    listen: 127.0.0.1:0
`, c.ListenAddrs()[0]), "test.yaml", &reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := zapobserver.New(zapcore.InfoLevel)
	rt, err := New(cfg, &reg, zap.New(core), "test")
	if err != nil {
		t.Fatal(err)
	}
	rt.Start(context.Background())
	defer stopRT(t, rt)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !create {
		for logs.FilterMessage("creating dead-letter topic; writes to it will be retried until it exists").Len() == 0 {
			if ctx.Err() != nil {
				t.Fatal("without Create on the dead-letter topic, wowd did not report it could not create it")
			}
			time.Sleep(20 * time.Millisecond)
		}
		return
	}
	if err := admin.ProduceSync(ctx,
		&kgo.Record{Topic: topic, Key: []byte("cart-1"), Value: event("from-kafka", "cart-1", "")},
		&kgo.Record{Topic: topic, Key: []byte("cart-2"), Value: []byte("not a Wow message")},
		&kgo.Record{Topic: topic, Key: []byte("cart-4"), Value: event("fails", "cart-4", "")},
	).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if code := postAuth(t, rt.IngestAddr(), "", event("ingested", "cart-3", "")).StatusCode; code != http.StatusAccepted {
		t.Fatalf("ingest answered %d, want 202", code)
	}

	// Everything consumed is committed: the group's offsets reach the ends.
	for {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		committed, err := adm.FetchOffsets(ctx, GroupID(cfg, "projection", "example"))
		if err == nil {
			done := true
			ends.Each(func(o kadm.ListedOffset) {
				at, ok := committed.Lookup(o.Topic, o.Partition)
				done = done && ok && at.At == o.Offset
			})
			if done {
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("offsets not committed to the ends %v: %v, %v", ends, committed, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if cnt.get("from-kafka") != 1 || cnt.get("ingested") != 1 {
		t.Errorf("handled from-kafka %d, ingested %d times; want 1, 1", cnt.get("from-kafka"), cnt.get("ingested"))
	}
	if n := endOffsets(t, adm, dlq); n != 1 {
		t.Errorf("the dead-letter topic %s holds %d records, want 1", dlq, n)
	}
	if n := endOffsets(t, adm, parked); n != 1 {
		t.Errorf("the parking topic %s holds %d records, want 1", parked, n)
	}
	if n := endOffsets(t, adm, state); n == 0 {
		t.Errorf("the parking state topic %s is empty", state)
	}
	for _, e := range logs.FilterLevelExact(zapcore.WarnLevel).All() {
		if e.Message != "record dead-lettered" && !strings.HasPrefix(e.Message, "aggregate parked:") {
			t.Errorf("warning: %s %v", e.Message, e.ContextMap())
		}
	}
	for _, e := range logs.FilterLevelExact(zapcore.ErrorLevel).All() {
		t.Errorf("error: %s %v", e.Message, e.ContextMap())
	}
}
