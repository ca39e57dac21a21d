package main_test

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/wowd/wowd/internal/admin"
	"github.com/wowd/wowd/internal/proctest"
)

// TestStatusCommand runs `wowd status` against a running `wowd dev`: the
// table names the receiver and its four partitions and the exit code is 0;
// --json is the admin API's status; a wrong address is exit code 1.
func TestStatusCommand(t *testing.T) {
	d := startDev(t, newSink(t, 0))
	url := fmt.Sprintf("http://127.0.0.1:%d", d.adminPort)

	var out string
	var code int
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out, code = proctest.Run(t, exec.Command(wowd.Path(t), "status", "--admin", url))
		if code == 0 && strings.Count(out, "wow.shop.cart.event/") == 4 || time.Now().After(deadline) {
			break
		}
	}
	if code != 0 || !strings.Contains(out, "to-sink/shop") || strings.Count(out, "wow.shop.cart.event/") != 4 {
		t.Fatalf("wowd status: exit %d\n%s", code, out)
	}

	out, code = proctest.Run(t, exec.Command(wowd.Path(t), "status", "--admin", url, "--json"))
	var st admin.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 || len(st.Receivers) != 1 || st.Receivers[0].Dispatcher != "to-sink" {
		t.Fatalf("wowd status --json: exit %d, %v\n%s", code, err, out)
	}

	if out, code := proctest.Run(t, exec.Command(wowd.Path(t), "status", "--admin", fmt.Sprintf("http://127.0.0.1:%d", d.metricsPort))); code != 1 {
		t.Errorf("wowd status against the metrics listener: exit %d, want 1\n%s", code, out)
	}
	proctest.Terminate(t, "wowd", d.cmd.Process, d.exited, 15*time.Second)
}
