package memory

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParseSizeQuotesTheTextAsWritten: an error quotes the size as it was
// written, not what is left once a unit it knows is cut off: 1PB was
// reported as "1P" is not a size.
func TestParseSizeQuotesTheTextAsWritten(t *testing.T) {
	for _, bad := range []string{"1PB", "12XB", "1.5GiB", "lots"} {
		_, err := ParseSize(bad)
		if err == nil || !strings.HasPrefix(err.Error(), `"`+bad+`" is not a size`) {
			t.Errorf("ParseSize(%q): %v, want it quoted whole", bad, err)
		}
	}
}

// TestResolveEnvReadsGOMEMLIMITAsTheRuntime: ResolveEnv resolves the limit
// Resolve would in a process started with the given environment, reading
// GOMEMLIMIT as the Go runtime does, so that `wowd config validate` can
// refuse what `wowd run` would (a GOMEMLIMIT below MinLimit).
func TestResolveEnvReadsGOMEMLIMITAsTheRuntime(t *testing.T) {
	none := t.TempDir() // no cgroup limit
	env := func(v string) func(string) string {
		return func(name string) string {
			if name == "GOMEMLIMIT" {
				return v
			}
			return ""
		}
	}
	for v, want := range map[string]int64{
		"16MiB": 16 << 20, "1GiB": 1 << 30, "2TiB": 2 << 40, "1000": 1000, "1000B": 1000, "+64KiB": 64 << 10,
		"":    DefaultLimit, // not set
		"off": DefaultLimit, // no limit
		"0":   DefaultLimit,
	} {
		got, src, err := ResolveEnv("", none, env(v))
		if err != nil || got != want {
			t.Errorf("GOMEMLIMIT=%q: %d (%s), %v; want %d", v, got, src, err, want)
		}
	}
	for _, v := range []string{"16MB", "16 MiB", "KiB", "5iB", "-1", "1.5GiB", "0x10", "9999999999TiB", "OFF"} {
		if n, ok := parseGoMemLimit(v); ok {
			t.Errorf("GOMEMLIMIT=%q, which the runtime refuses, read as %d", v, n)
		}
		if _, _, err := ResolveEnv("", none, env(v)); err == nil || !strings.Contains(err.Error(), "GOMEMLIMIT") {
			t.Errorf("GOMEMLIMIT=%q: %v, want an error naming it", v, err)
		}
	}
	if n, ok := parseGoMemLimit("off"); !ok || n != math.MaxInt64 {
		t.Errorf("off: %d, %v", n, ok)
	}

	// The configured size and the container's limit come first, as in
	// Resolve.
	if got, src, _ := ResolveEnv("64MiB", none, env("16MiB")); got != 64<<20 || src != "wow.memory.limit" {
		t.Errorf("configured: %d from %s", got, src)
	}
	cg := t.TempDir()
	if err := os.WriteFile(filepath.Join(cg, "memory.max"), []byte("1073741824\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := ResolveEnv("", cg, env("16MiB")); got != 858993459 {
		t.Errorf("container: %d", got)
	}
}
