package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wowd/wowd/internal/config"
)

// TestValidateResolvesTheMemoryLimitAsRunDoes: with wow.memory.limit empty,
// wowd run takes its limit from the container's or from GOMEMLIMIT, and
// refuses one below 32MiB; `wowd config validate` (Load, which checks the
// configuration where it is to run) said ok to the same environment. It
// resolves the limit as run does and reports it under wow.memory.limit.
func TestValidateResolvesTheMemoryLimitAsRunDoes(t *testing.T) {
	cgroup := t.TempDir() // no container limit
	config.SetCgroupRoot(t, cgroup)
	path := filepath.Join(t.TempDir(), "wowd.yaml")
	if err := os.WriteFile(path, []byte(minimalYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	load := func(env ...string) error {
		_, err := config.Load(path, testRegistry(), env)
		return err
	}

	err := load("GOMEMLIMIT=16MiB")
	if err == nil {
		t.Fatal("GOMEMLIMIT=16MiB, below the minimum, accepted")
	}
	if want := "wow.memory.limit: empty, so the limit comes from GOMEMLIMIT: 16777216 bytes, below the minimum of 32MiB"; !strings.Contains(err.Error(), want) {
		t.Errorf("missing %q in:\n%v", want, err)
	}
	if config.Invalid(err) {
		t.Errorf("Invalid(%v): the environment, not the configuration, is at fault", err)
	}
	if err := load("GOMEMLIMIT=lots"); err == nil || !strings.Contains(err.Error(), "wow.memory.limit: empty, so the limit comes from the environment: environment variable GOMEMLIMIT") {
		t.Errorf("GOMEMLIMIT=lots: %v", err)
	}
	for _, env := range [][]string{nil, {"GOMEMLIMIT=64MiB"}, {"GOMEMLIMIT=off"}, {"GOMEMLIMIT=16MiB", "WOW_MEMORY_LIMIT=64MiB"}} {
		if err := load(env...); err != nil {
			t.Errorf("%v: %v", env, err)
		}
	}
	// Parse checks the document alone.
	if _, err := config.Parse([]byte(minimalYAML), path, testRegistry(), []string{"GOMEMLIMIT=16MiB"}); err != nil {
		t.Errorf("Parse: %v", err)
	}

	// 80% of a container's 32MiB is below the minimum too.
	if err := os.WriteFile(filepath.Join(cgroup, "memory.max"), []byte("33554432\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := load(); err == nil || !strings.Contains(err.Error(), "wow.memory.limit: empty, so the limit comes from 80% of the container's limit (33554432 bytes): 26843545 bytes, below the minimum") {
		t.Errorf("container limit of 32MiB: %v", err)
	}
}
