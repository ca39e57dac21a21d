package cli

import (
	"runtime/debug"
	"testing"
)

// An unstamped build names what it was built from instead of "(devel)".
func TestBuildVersion(t *testing.T) {
	rev := "b2c225796621e325e1bab2e364cea3a920e5d60a"
	for _, c := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"no build info", nil, "devel"},
		{"module version from the commit", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261207063849-b2c225796621"}}, "v0.0.0-20261207063849-b2c225796621"},
		{"devel without vcs", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "devel"},
		{"devel with a commit", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "false"}}}, "devel-b2c225796621"},
		{"devel with changes", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "true"}}}, "devel-b2c225796621-dirty"},
		{"empty version", &debug.BuildInfo{}, "devel"},
	} {
		if got := buildVersion(c.bi); got != c.want {
			t.Errorf("%s: buildVersion = %q, want %q", c.name, got, c.want)
		}
	}
}
