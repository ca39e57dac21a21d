package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/wowd/wowd/handler"
)

// wowd runs the command line in process, as cmd/wowd's main does.
func wowd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut, nil, handler.Default())
	return code, out.String(), errOut.String()
}

// TestUsageErrorsExit2 checks that every command exits 2, the code of a
// configuration or usage error, on an unknown flag, a flag value that does
// not parse, a missing required flag, an argument it does not take and an
// unknown command; before, most exited 1 and a few 2.
func TestUsageErrorsExit2(t *testing.T) {
	commands := [][]string{
		{"run"}, {"dev"}, {"config", "validate"}, {"config", "print"}, {"handlers"}, {"version"},
		{"status"}, {"rewind"},
		{"parked", "list"}, {"parked", "show"}, {"parked", "redrive"}, {"parked", "skip"}, {"parked", "discard"},
	}
	var cases [][]string
	for _, c := range commands {
		cases = append(cases,
			append(append([]string{}, c...), "--no-such-flag"),
			append(append([]string{}, c...), "unexpected-argument"))
	}
	cases = append(cases,
		[]string{"dev", "--partitions", "many"},
		[]string{"config", "print", "--plain=maybe"},
		[]string{"status", "--top", "ten"},
		[]string{"rewind", "--timeout", "soon"},
		[]string{"parked", "list", "--dispatcher"}, // no value
		[]string{"parked", "list"},                 // --dispatcher is required
		[]string{"no-such-command"},
		[]string{"config", "no-such-verb"},
		[]string{"parked", "no-such-verb"},
		[]string{"--no-such-flag"},
	)
	for _, args := range cases {
		code, out, errOut := wowd(t, args...)
		if code != ExitConfig {
			t.Errorf("wowd %s: exit %d, want %d (usage error)\n%s%s", strings.Join(args, " "), code, ExitConfig, out, errOut)
		}
	}
	if _, _, errOut := wowd(t, "config", "valdate"); !strings.Contains(errOut, `unknown command "valdate" for "wowd config"; did you mean validate?`) {
		t.Errorf("a mistyped verb is not named with a suggestion:\n%s", errOut)
	}
	for _, args := range [][]string{{}, {"config"}, {"parked"}, {"--help"}, {"parked", "list", "--help"}, {"help", "rewind"}} {
		if code, out, errOut := wowd(t, args...); code != ExitOK || !strings.Contains(out, "Usage:") {
			t.Errorf("wowd %s: exit %d, want 0 and the help\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
	}
}

// TestRewindNegativeTimeout: a negative --timeout is a usage error naming
// the flag, not a deadline exceeded once the rewind has started.
func TestRewindNegativeTimeout(t *testing.T) {
	cfg := writeConfig(t, `wow:
  service: carts
  kafka:
    bootstrap-servers: [127.0.0.1:1]
  contexts:
    example-service:
      alias: example
      aggregates: [cart]
  dispatchers:
    projection:
      topics: [event]
      handler: {type: discard}
`)
	for _, timeout := range []string{"-1s", "0s"} {
		code, out, errOut := wowd(t, "rewind", "--config", cfg, "--dispatcher", "projection", "--to", "earliest", "--timeout", timeout)
		if code != ExitConfig || !strings.Contains(errOut, "--timeout "+timeout) {
			t.Errorf("--timeout %s: exit %d, want %d naming --timeout\n%s%s", timeout, code, ExitConfig, out, errOut)
		}
	}
}
