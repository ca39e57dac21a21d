package daemon

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/wowd/wowd/internal/admin"
	"github.com/wowd/wowd/internal/bearer"
	"github.com/wowd/wowd/internal/config"
	"github.com/wowd/wowd/internal/park"
	"github.com/wowd/wowd/internal/receiver"
)

// buildAdmin binds the admin listener (wow.admin.listen), so a taken port
// fails the start.
func (rt *Daemon) buildAdmin() error {
	cfg := rt.cfg
	log := rt.log.Named("admin")
	o := admin.Options{
		Service: cfg.Service,
		Version: rt.version,
		Started: rt.started,
		Source:  adminSource{rt},
		Parked:  adminParked{rt},
		Log:     log,
	}
	o.Instance, _ = os.Hostname()
	if cfg.Admin.TokenFile != "" {
		tok, err := bearer.Open(cfg.Admin.TokenFile, "admin", log)
		if err != nil {
			return &ConfigError{Path: "wow.admin.token-file", Err: err}
		}
		o.Token = tok
	}
	tc, err := listenerTLS("wow.admin.tls", cfg.Admin.TLS, log)
	if err != nil {
		return err
	}
	if tc != nil {
		o.TLS, o.ClientCerts = tc.Config(), tc.MutualTLS()
	}
	srv, err := admin.New(cfg.Admin.Listen, o)
	if err != nil {
		return fmt.Errorf("wow.admin.listen: %w", err) // in use: not a configuration error
	}
	rt.admin = srv
	return nil
}

// AdminAddr returns the address the admin listener is bound to, or "".
func (rt *Daemon) AdminAddr() string {
	if rt.admin == nil {
		return ""
	}
	return rt.admin.Addr()
}

// adminSource is what the admin API reads of the daemon.
type adminSource struct{ rt *Daemon }

func (s adminSource) Receivers(top int) []receiver.Status {
	out := make([]receiver.Status, 0, len(s.rt.receivers))
	for _, r := range s.rt.receivers {
		out = append(out, r.Status(top))
	}
	return out
}

func (s adminSource) Executor() admin.Executor {
	st := s.rt.ex.Stats()
	return admin.Executor{Workers: st.Workers, Busy: s.rt.ex.Busy(), Mailboxes: st.Mailboxes, QueuedMailboxes: st.QueuedMailboxes}
}

func (s adminSource) Outcomes(dispatcher, context string) map[string]float64 {
	return s.rt.metrics.Outcomes(dispatcher, context)
}

// adminParked is the parked-aggregate store of the admin API: the
// aggregates the dispatchers parked, in every partition of their topics
// (those this instance owns marked), and requests written to the
// dispatchers' state topics, as `wowd parked` writes them.
type adminParked struct{ rt *Daemon }

func (p adminParked) List(context.Context) ([]admin.ParkedAggregate, error) {
	out := []admin.ParkedAggregate{}
	for _, r := range p.rt.receivers {
		for _, pa := range r.Parked() {
			out = append(out, admin.ParkedAggregate{
				Dispatcher: r.Dispatcher(), Context: pa.Context, Aggregate: pa.AggregateType, ID: pa.Aggregate,
				Topic: pa.Topic, Partition: pa.Partition, Offset: pa.Offset, Class: pa.Class, Reason: pa.Reason,
				Attempts: pa.Attempts, Since: pa.Since, Owned: pa.Owned, Busy: pa.Busy, HeadPastFailure: pa.HeadPastFailure(),
			})
		}
	}
	return out, nil
}

// ParksByHand implements admin.ByHand.
func (p adminParked) ParksByHand() bool { return true }

// Park asks for aggregate id of dispatcher d to be parked in every topic
// the dispatcher consumes that exists; the owner of its partition parks
// it in its mailbox's order. With none of them existing nothing is asked,
// and it says so rather than answer as if the aggregate would park.
func (p adminParked) Park(ctx context.Context, d, id string) error {
	disp, ok := p.rt.cfg.Dispatchers[d]
	if !ok {
		return fmt.Errorf("dispatcher %q: %w", d, admin.ErrNotFound)
	}
	if disp.FailurePolicy() != config.OnFailurePark {
		return fmt.Errorf("dispatcher %s does not park (on-failure: %s): %w", d, disp.FailurePolicy(), admin.ErrNotSupported)
	}
	// Every receiver's topics are listed before anything is asked: one
	// that cannot be listed asks for nothing anywhere.
	var plans []receiver.HandPark
	n := 0
	for _, r := range p.rt.receivers {
		if r.Dispatcher() != d {
			continue
		}
		plan, err := r.PlanParkByHand(ctx, id)
		if err != nil {
			return err
		}
		plans, n = append(plans, plan), n+plan.Topics()
	}
	if n == 0 {
		return fmt.Errorf("none of the topics of dispatcher %s exists (%s): nothing to park %q in: %w",
			d, strings.Join(DispatcherTopics(p.rt.cfg, disp), ", "), id, admin.ErrNotFound)
	}
	for _, plan := range plans {
		if _, err := plan.Ask(ctx, admin.Caller(ctx)); err != nil {
			return err
		}
	}
	return nil
}

func (p adminParked) Redrive(ctx context.Context, d, id string) error {
	return p.ask(ctx, d, id, park.Redrive)
}
func (p adminParked) Skip(ctx context.Context, d, id string) error {
	return p.ask(ctx, d, id, park.Skip)
}
func (p adminParked) Discard(ctx context.Context, d, id string) error {
	return p.ask(ctx, d, id, park.Discard)
}

// ask requests action on aggregate id of dispatcher d, wherever the
// dispatcher has it parked; each partition's owner carries it out.
func (p adminParked) ask(ctx context.Context, d, id, action string) error {
	disp, ok := p.rt.cfg.Dispatchers[d]
	if !ok {
		return fmt.Errorf("dispatcher %q: %w", d, admin.ErrNotFound)
	}
	if disp.FailurePolicy() != config.OnFailurePark {
		// As Park says, and wowd parked: not "not parked" (404), which
		// reads as a wrong aggregate ID.
		return fmt.Errorf("dispatcher %s does not park (on-failure: %s): %w", d, disp.FailurePolicy(), admin.ErrNotSupported)
	}
	if action != park.Redrive && !disp.DeadLetter.Enabled {
		// The owner would refuse it and leave the aggregate parked (as
		// wowd parked refuses it): say so now rather than answer 202.
		return fmt.Errorf("%s writes to the dead-letter topic, and dispatcher %s has wow.dispatchers.%s.dead-letter.enabled false: %w",
			action, d, d, admin.ErrNotSupported)
	}
	n := 0
	for _, r := range p.rt.receivers {
		if r.Dispatcher() != d {
			continue
		}
		k, err := r.AskParked(ctx, id, action, admin.Caller(ctx))
		n += k
		if err != nil {
			return err
		}
	}
	if n == 0 {
		return fmt.Errorf("aggregate %q of dispatcher %s is not parked: %w", id, d, admin.ErrNotFound)
	}
	return nil
}
