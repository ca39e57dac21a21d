package configs_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
	"github.com/wowd/wowd/internal/handlerconfig"
	_ "github.com/wowd/wowd/internal/handlers" // registers the built-in handler types
)

// keySection returns the lines of the top-level section seg of wow (a key
// at indent 2, commented or not), up to the next uncommented key at indent 2.
func keySection(lines []string, seg string) (string, bool) {
	start := regexp.MustCompile(`^  (# )?` + regexp.QuoteMeta(seg) + `:`)
	next := regexp.MustCompile(`^  [a-z-]+:`)
	for i, l := range lines {
		if !start.MatchString(l) {
			continue
		}
		j := i + 1
		for j < len(lines) && !next.MatchString(lines[j]) {
			j++
		}
		return strings.Join(lines[i:j], "\n"), true
	}
	return "", false
}

// TestExampleConfigHasEveryKey checks the claim of README.md
// ("configs/wowd.yaml: every key, commented"), of docs/configuration.md
// ("configs/wowd.yaml is a commented example with every key") and of the
// file's own first line ("A complete wowd configuration with every key, its
// default and what it does"): every fixed key, and every key of the http
// handler the example's dispatcher uses, appears in it, set or commented.
func TestExampleConfigHasEveryKey(t *testing.T) {
	data, err := os.ReadFile("wowd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	has := func(block, leaf string) bool {
		return regexp.MustCompile(`(^|[\s{,#])` + regexp.QuoteMeta(leaf) + `:`).MatchString(block)
	}
	var missing []string
	for _, k := range config.Keys() {
		segs := strings.Split(strings.TrimPrefix(k.Path, "wow."), ".")
		block, ok := keySection(lines, segs[0])
		if !ok {
			missing = append(missing, k.Path)
			continue
		}
		if k.Env != "" && strings.Contains(string(data), k.Env) {
			continue // named by its environment variable (the SASL password)
		}
		if leaf := segs[len(segs)-1]; len(segs) > 1 && leaf != "<name>" && !has(block, leaf) {
			missing = append(missing, k.Path)
		}
	}
	spec, ok := handler.Default().Lookup("http")
	if !ok {
		t.Fatal("no http handler registered")
	}
	dispatchers, _ := keySection(lines, "dispatchers")
	for _, f := range handlerconfig.Fields(spec) {
		segs := strings.Split(f.Name, ".")
		if !has(dispatchers, segs[len(segs)-1]) {
			missing = append(missing, "wow.dispatchers.<name>.handler."+f.Name+" (http)")
		}
	}
	if len(missing) > 0 {
		t.Errorf("configs/wowd.yaml, documented as holding every key, lacks %d:\n  %s", len(missing), strings.Join(missing, "\n  "))
	}
}
