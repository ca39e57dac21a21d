package daemon

import (
	"fmt"
	"os"

	"github.com/wowd/wowd/internal/admin"
	"github.com/wowd/wowd/internal/bearer"
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
