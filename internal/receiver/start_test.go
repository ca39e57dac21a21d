package receiver

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/wowd/wowd/internal/park"
)

// Two dispatchers on one source share its parked topic (<src>.parked) and
// its default dead-letter topic (<src>.dlq). Started side by side (as
// Daemon.Start now does), one creates them and the other gets
// TopicAlreadyExists and at once asks a broker for their
// max.message.bytes, which a broker whose metadata lags the controller
// answers with UNKNOWN_TOPIC_OR_PARTITION: simulated here for 30 ms after
// a create. The second must ask again (topicsize.MaxMessageBytesOfExisting),
// or its parked copies and dead letters keep to 1000012-byte batches until
// a restart: a larger parked copy then holds its partition.
func TestReceiversStartedTogetherSizeTheTopicsTheyShare(t *testing.T) {
	h := newHarness(t, 2)
	var mu sync.Mutex
	created := map[string]time.Time{}
	h.c.ControlKey(int16(kmsg.CreateTopics), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.c.KeepControl()
		mu.Lock()
		for _, tp := range req.(*kmsg.CreateTopicsRequest).Topics {
			if _, ok := created[tp.Topic]; !ok {
				created[tp.Topic] = time.Now()
			}
		}
		mu.Unlock()
		return nil, nil, false
	})
	h.c.ControlKey(int16(kmsg.DescribeConfigs), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.c.KeepControl()
		r := req.(*kmsg.DescribeConfigsRequest)
		resp := r.ResponseKind().(*kmsg.DescribeConfigsResponse)
		mu.Lock()
		defer mu.Unlock()
		for _, rs := range r.Resources {
			at, ok := created[rs.ResourceName]
			if !ok || time.Since(at) > 30*time.Millisecond {
				return nil, nil, false
			}
			rr := kmsg.NewDescribeConfigsResponseResource()
			rr.ResourceType, rr.ResourceName = rs.ResourceType, rs.ResourceName
			rr.ErrorCode = kerr.UnknownTopicOrPartition.Code
			resp.Resources = append(resp.Resources, rr)
		}
		return resp, nil, true
	})
	a := h.newReceiver("g-a", newRecorder(), 16, func(o *Options) { o.Park = &Parking{StateTopic: "state-a", Max: 10} })
	b := h.newReceiver("g-b", newRecorder(), 16, func(o *Options) { o.Park = &Parking{StateTopic: "state-b", Max: 10} })
	var wg sync.WaitGroup
	for _, r := range []*Receiver{a, b} {
		wg.Go(func() { r.Start(context.Background()) })
	}
	wg.Wait()
	defer stop(t, a)
	defer stop(t, b)
	for name, r := range map[string]*Receiver{"a": a, "b": b} {
		s := r.park.sizes.Load()
		if _, ok := s.limit[park.Topic(testTopic)]; !ok {
			t.Errorf("receiver %s did not learn %s's max.message.bytes: its parked copies keep to 1000012-byte batches until a restart", name, park.Topic(testTopic))
		}
		if _, ok := r.deadLetterLimit(testTopic + ".dlq"); !ok {
			t.Errorf("receiver %s did not learn %s.dlq's max.message.bytes", name, testTopic)
		}
	}
}

// TestLateDeadLetterTopicsDuringStart: a local record dead-lettered while
// Start runs (the ingest takes records before the receivers start) makes
// the dead-letter topics late, at the same time as Start makes them and the
// parked ones: both read the sources' limits (srcMax), which the race
// detector saw written from two goroutines at once.
func TestLateDeadLetterTopicsDuringStart(t *testing.T) {
	h := newHarness(t, 2)
	r := h.newReceiver("g-late", newRecorder(), 16, func(o *Options) { o.Park = &Parking{StateTopic: "state-late", Max: 10} })
	var wg sync.WaitGroup
	wg.Go(func() { r.Start(context.Background()) })
	wg.Go(func() { r.ensureDeadLetterTopicsLate(context.Background()) })
	wg.Wait()
	stop(t, r)
	if _, ok := r.deadLetterLimit(testTopic + ".dlq"); !ok {
		t.Errorf("the dead-letter topic's limit was not read")
	}
}
