package metrics

import "github.com/prometheus/client_golang/prometheus"

// ReloadOutcome is what became of a change of the configuration file; the
// value of the outcome label of wowd_config_reloads_total.
type ReloadOutcome uint8

// Reload outcomes.
const (
	ReloadApplied       ReloadOutcome = iota // every changed key applied while running
	ReloadRestartNeeded                      // some changed keys need a restart: not applied (the reloadable ones were)
	ReloadInvalid                            // the new file was refused as a whole for what it says: the running configuration stays
	ReloadRetrying                           // the new file could not be applied for a passing reason: it is read again until it applies
	ReloadUnchanged                          // the file was read again (a change, or SIGHUP) and no key changed: a comment, a change reverted to what runs
	numReloadOutcomes
)

var reloadOutcomeNames = [numReloadOutcomes]string{"applied", "restart_needed", "invalid", "retrying", "unchanged"}

// String returns the label value.
func (o ReloadOutcome) String() string { return reloadOutcomeNames[o] }

// Reloads counts the changes of the configuration file a running wowd read.
type Reloads struct {
	outcomes [numReloadOutcomes]prometheus.Counter
}

// Reloads registers wowd_config_reloads_total and returns its instruments;
// call it once.
func (m *Metrics) Reloads() *Reloads {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "config_reloads_total",
		Help: "Changes of the configuration file read while running, by outcome (outcome: applied; restart_needed: some changed keys need a restart and were not applied; invalid: the file was refused for what it says and the running configuration stays; retrying: the file could not be applied for a reason outside it, such as a file it names missing or wow.metadata not answering, and is read again until it applies, counted once per distinct error; unchanged: the file was read again, after a change or a SIGHUP, and no key changed, such as a comment edited or a change reverted to what runs).",
	}, []string{"outcome"})
	m.Registry.MustRegister(vec)
	r := &Reloads{}
	for o := range numReloadOutcomes {
		r.outcomes[o] = vec.WithLabelValues(o.String())
	}
	return r
}

// Count records one change of the file with outcome o.
func (r *Reloads) Count(o ReloadOutcome) { r.outcomes[o].Inc() }
