package admin

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"go.uber.org/zap"
)

// Parked acts on the aggregates a dispatcher parked (on-failure: park):
// their messages wait in the parked topics until someone decides. The
// admin API lists them and forwards the actions; a dispatcher and an
// aggregate ID name one parked aggregate.
type Parked interface {
	List(ctx context.Context) ([]ParkedAggregate, error)
	// Park holds an aggregate by hand: its messages wait, the others run.
	// ErrNotSupported when the store cannot.
	Park(ctx context.Context, dispatcher, id string) error
	// Redrive hands the parked messages to the handler again, in order.
	// Like Skip and Discard it may only ask for it: the action is done
	// when the aggregate leaves List.
	Redrive(ctx context.Context, dispatcher, id string) error
	// Skip drops the parked message at the head and unparks the rest.
	Skip(ctx context.Context, dispatcher, id string) error
	// Discard drops every parked message of the aggregate.
	Discard(ctx context.Context, dispatcher, id string) error
}

// Errors a Parked implementation returns for the API to answer 404, 409
// and 501.
var (
	ErrNotFound     = errors.New("no such dispatcher or parked aggregate")
	ErrConflict     = errors.New("the aggregate is not in a state that allows this")
	ErrNotSupported = errors.New("not supported")
)

// ParkedAggregate is an aggregate held by its dispatcher.
type ParkedAggregate struct {
	Dispatcher string `json:"dispatcher"`
	Context    string `json:"context"`
	Aggregate  string `json:"aggregate"` // aggregate type
	ID         string `json:"id"`
	// IDBytes holds the ID, in base64, where it is not valid UTF-8 (as
	// HotAggregate's); the admin API sets it, a Parked implementation
	// need not.
	IDBytes []byte `json:"id_bytes,omitempty"`
	// Topic, Partition and Offset are where the message that parked it was.
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	Class     string    `json:"class"`  // of the failure: permanent, timeout, …
	Reason    string    `json:"reason"` // the failure, as the handler reported it
	Attempts  int       `json:"attempts"`
	Since     time.Time `json:"since"`
	// HeadPastFailure says an action's progress (a redrive or skip cut
	// short) moved the parked messages' start past the message that
	// failed: Offset is where they start now, Class and Reason are still
	// that message's, and a skip dead-letters nothing (the head has not
	// failed), it redrives.
	HeadPastFailure bool `json:"head_past_failure,omitempty"`
	// Owned says the aggregate's partition is this instance's: its parked
	// messages are redriven here. The list has the dispatcher's parked
	// aggregates in every partition, as its state topic says; an action
	// on one owned elsewhere is carried out by its owner.
	Owned bool `json:"owned"`
	// Busy says an action on it is under way, or asked for and not yet
	// taken up by the partition's owner.
	Busy bool `json:"busy"`
}

type callerKey struct{}

// Caller returns who made the admin request in ctx ("admin API, <remote
// address>"), for a Parked implementation to record; "" outside one.
func Caller(ctx context.Context) string {
	s, _ := ctx.Value(callerKey{}).(string)
	return s
}

// ParkedStatus is the parked part of a Status.
type ParkedStatus struct {
	// Available is false when this build has no parked-aggregate store
	// wired (the actions answer 501), or listing it failed (Error).
	Available bool `json:"available"`
	// ParkByHand says the park action is offered (see ByHand).
	ParkByHand bool              `json:"park_by_hand"`
	Error      string            `json:"error,omitempty"`
	Aggregates []ParkedAggregate `json:"aggregates"`
}

// notWired is the answer while no Parked implementation is wired.
const notWired = "parked aggregates are not available in this build: the parking store is not wired to the admin API yet"

// actions are the POST verbs, by path segment.
var actions = map[string]func(Parked, context.Context, string, string) error{
	"park":    Parked.Park,
	"redrive": Parked.Redrive,
	"skip":    Parked.Skip,
	"discard": Parked.Discard,
}

// parked lists the parked aggregates for a status.
func (s *Server) parked(r *http.Request) ParkedStatus {
	if s.o.Parked == nil {
		return ParkedStatus{Error: notWired, Aggregates: []ParkedAggregate{}}
	}
	list, err := s.o.Parked.List(r.Context())
	if err != nil {
		return ParkedStatus{Error: err.Error(), Aggregates: []ParkedAggregate{}}
	}
	if list == nil {
		list = []ParkedAggregate{}
	}
	list = slices.Clone(list) // the implementation's own, perhaps
	for i := range list {
		list[i].IDBytes = idBytes(list[i].ID)
	}
	return ParkedStatus{Available: true, Aggregates: list, ParkByHand: parksByHand(s.o.Parked)}
}

// ByHand is implemented by a Parked store that tells whether it can park
// an aggregate by hand; one that does not implement it can.
type ByHand interface{ ParksByHand() bool }

func parksByHand(p Parked) bool {
	if b, ok := p.(ByHand); ok {
		return b.ParksByHand()
	}
	return true
}

// act serves POST /admin/v1/dispatchers/{dispatcher}/aggregates/{id}/{action}.
func (s *Server) act(w http.ResponseWriter, r *http.Request) {
	action, d, id := r.PathValue("action"), r.PathValue("dispatcher"), r.PathValue("id")
	log := s.log.With(zap.String("action", action), zap.String("dispatcher", d), zap.String("aggregate", id),
		zap.String("remote", r.RemoteAddr))
	fn, ok := actions[action]
	if !ok {
		log.Warn("admin action refused: unknown action")
		writeError(w, http.StatusNotFound, "unknown action "+action+": want park, redrive, skip or discard")
		return
	}
	if s.o.Parked == nil {
		log.Warn("admin action refused: parking not wired", zap.Int("status", http.StatusNotImplemented))
		writeError(w, http.StatusNotImplemented, notWired)
		return
	}
	ctx := context.WithValue(r.Context(), callerKey{}, "admin API, "+r.RemoteAddr)
	err := fn(s.o.Parked, ctx, d, id)
	code := http.StatusAccepted // asked: the aggregate's owner acts on it
	switch {
	case err == nil:
	case errors.Is(err, ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, ErrConflict):
		code = http.StatusConflict
	case errors.Is(err, ErrNotSupported):
		code = http.StatusNotImplemented
	default:
		code = http.StatusInternalServerError
	}
	if err != nil {
		log.Warn("admin action failed", zap.Int("status", code), zap.Error(err))
		writeError(w, code, action+" "+d+"/"+id+": "+err.Error())
		return
	}
	log.Info("admin action requested", zap.Int("status", code))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(`{"ok":true}` + "\n"))
}
