package deploy

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/wowd/wowd/internal/metrics"
)

// The dashboard has Dispatcher and Context variables, and every panel of
// a receiver's figures narrows to them, except the "Parked aggregates"
// row's: wowd_parked_aggregates, wowd_receiver_park_full,
// wowd_parked_oldest_age_seconds and wowd_parked_actions_total are
// selected by instance only, so with one dispatcher selected those panels
// still show (and sum) every dispatcher's parked aggregates. Found by
// review.
func TestDashboardPanelsFollowTheDispatcherVariable(t *testing.T) {
	labels := map[string][]string{}
	for _, d := range metrics.Catalog() {
		labels[d.Name] = d.Labels
	}
	sel := regexp.MustCompile(`\b(wowd_[a-z_]+?)(_bucket|_sum|_count)?\{([^}]*)\}`)
	for _, e := range dashboardExprs(t) {
		if strings.HasPrefix(e, "label_values(") {
			continue // the variables' own queries
		}
		for _, m := range sel.FindAllStringSubmatch(e, -1) {
			ls, ok := labels[m[1]]
			if !ok || !slices.Contains(ls, "dispatcher") {
				continue
			}
			if !strings.Contains(m[3], `dispatcher=~"$dispatcher"`) {
				t.Errorf("dashboard query ignores the Dispatcher variable: %s", e)
			}
		}
	}
}
