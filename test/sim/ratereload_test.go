package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/wowd/wowd/internal/handlerconfig"
)

// Rate-limit reloads: in the runs with the HTTP sink, the operator changes
// the sinks' rate-limit and rate-burst now and then, as a reload of the
// configuration file does (the sink's Reconfigure, then the function it
// returns): to none, to 1-3 requests a second (tries wait for their turn
// past the handler timeout and give it back), or to 30-80 with bursts of
// 1-4; at the calm, back to the seed's own. The server takes the member a
// request comes from from a header of the member's sink (simMemberHeader)
// and records when each arrived (sinkArrival).
//
// Invariant (checkRatesLocked): a sink sends no more requests than its
// limit allows, retries and batches included (rate-limit's docs), under
// whatever limit was set last: in every second that starts at a request
// after a change, at most max(burst, the burst before) + rate + 1
// requests arrive. Seconds in which the member's network came back from a
// cut are left out: the requests the limiter let go while the member was
// cut off wait for their connection and arrive together as it comes back,
// as through any client-side limiter. A reload that left a second limiter beside the first,
// or started the new one afresh with the waiters of the old one, lets
// about twice that through. That queued requests go on after a raise
// shows in the calm's bound (every partition committed in time).

// simMemberHeader names the member a sink's request comes from.
const simMemberHeader = "X-Sim-Member"

// rateEpoch is a sink's limit from at on (rate 0: none).
type rateEpoch struct {
	at          time.Time
	rate, burst int
	burstBefore int
}

// sinkLimit is the rate-limit and rate-burst the members' sinks run
// with now: the seed's own, or the last reload's. Under w.mu.
type sinkLimit struct{ rate, burst int }

// noteRateLocked records that member's sink runs with l from now on.
func (w *world) noteRateLocked(member int, l sinkLimit) {
	es := w.rates[member]
	before := 0
	if len(es) > 0 {
		before = es[len(es)-1].burst
	}
	w.rates[member] = append(es, rateEpoch{at: time.Now(), rate: l.rate, burst: l.burst, burstBefore: before})
}

// sinkArrival records a request of member's sink arriving now.
func (w *world) sinkArrival(member string) {
	id, err := strconv.Atoi(member)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.violateLocked("a sink request came without its member's header (%q)", member)
		return
	}
	w.arrivals[id] = append(w.arrivals[id], time.Now())
}

// reloadRates draws a new limit and reloads every member's sink with it.
func (w *world) reloadRates(t *testing.T, rng *rand.Rand, members []*member) {
	var l sinkLimit
	switch rng.IntN(4) {
	case 0: // none
	case 1:
		l = sinkLimit{1 + rng.IntN(3), 1 + rng.IntN(2)}
	default:
		l = sinkLimit{30 + rng.IntN(51), 1 + rng.IntN(4)}
	}
	w.event("the sinks' rate-limit is reloaded: %d a second (burst %d; 0: none)", l.rate, l.burst)
	w.setRates(t, l, members)
}

// setRates reloads every member's sink with l, and has the members started
// later built with it.
func (w *world) setRates(t *testing.T, l sinkLimit, members []*member) {
	w.mu.Lock()
	w.limit = l
	w.rateReloads++
	w.mu.Unlock()
	for _, m := range members {
		if m.sink == nil {
			continue
		}
		cfg, err := handlerconfig.Decode(m.sink.spec, w.sinkConfig(m.id, l))
		if err != nil {
			t.Fatal(err)
		}
		apply, err := m.sink.sink.(reconfigurer).Reconfigure(cfg)
		if err != nil {
			t.Errorf("seed %d: reload of member %d's sink: %v", w.seed, m.id, err)
			continue
		}
		apply()
		w.mu.Lock()
		w.noteRateLocked(m.id, l)
		w.mu.Unlock()
	}
}

// reconfigurer is the part of the sink a reload calls.
type reconfigurer interface {
	Reconfigure(cfg any) (apply func(), err error)
}

// checkRatesLocked checks that no member's sink sent more requests in a
// second than the limit set last allowed (see the top of this file).
func (w *world) checkRatesLocked(members []*member) {
	heals := map[int][]time.Time{}
	for _, m := range members {
		heals[m.id] = m.net.healTimes()
	}
	for member, es := range w.rates {
		arr := w.arrivals[member]
		for i, e := range es {
			if e.rate == 0 {
				continue
			}
			end := time.Time{}
			if i+1 < len(es) {
				end = es[i+1].at
			}
			var in []time.Time // strictly inside the epoch: one at a change may be of either side
			for _, a := range arr {
				if a.After(e.at) && (end.IsZero() || a.Before(end)) {
					in = append(in, a)
				}
			}
			bound := max(e.burst, e.burstBefore) + e.rate + 1
			k := 0
			for j, a := range in {
				for k < len(in) && in[k].Before(a.Add(time.Second)) {
					k++
				}
				healed := slices.ContainsFunc(heals[member], func(h time.Time) bool { return !h.Before(a) && h.Before(a.Add(time.Second)) })
				if n := k - j; n > bound && !healed {
					w.violateLocked("member %d's sink sent %d requests in the second from %.3fs at a rate-limit of %d (burst %d, %d before; set at %.3fs): at most %d", member, n,
						float64(a.Sub(start))/1e9, e.rate, e.burst, e.burstBefore, float64(e.at.Sub(start))/1e9, bound)
					break
				}
			}
		}
	}
}

// rateSummaryLocked describes the run's rate-limit reloads.
func (w *world) rateSummaryLocked() string {
	if w.sink == nil {
		return ""
	}
	n := 0
	for _, a := range w.arrivals {
		n += len(a)
	}
	return fmt.Sprintf(", %d rate-limit reloads, %d sink requests", w.rateReloads, n)
}
