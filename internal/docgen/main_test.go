package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
	"github.com/wowd/wowd/internal/handlerconfig"
	"github.com/wowd/wowd/internal/handlers"
	"github.com/wowd/wowd/internal/metrics"
)

// TestDocsAreCurrent regenerates the references into a temporary directory
// and compares them with the committed ones.
func TestDocsAreCurrent(t *testing.T) {
	dir := t.TempDir()
	if err := write(dir); err != nil {
		t.Fatal(err)
	}
	for _, g := range generated {
		want, err := os.ReadFile(filepath.Join(dir, g.name))
		if err != nil {
			t.Fatal(err)
		}
		have, err := os.ReadFile(filepath.Join("..", "..", "docs", g.name))
		if err != nil {
			t.Errorf("docs/%s is missing (%v): run make docs", g.name, err)
			continue
		}
		if !bytes.Equal(have, want) {
			t.Errorf("docs/%s is stale: run make docs\n%s", g.name, firstDifference(string(have), string(want)))
		}
	}
	for _, sec := range sections {
		have, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(sec.path)))
		if err != nil {
			t.Errorf("%s is missing: %v", sec.path, err)
			continue
		}
		want, err := sec.splice(have)
		if err != nil {
			t.Errorf("%s: %v", sec.path, err)
			continue
		}
		if !bytes.Equal(have, want) {
			t.Errorf("%s is stale (section %s): run make docs\n%s", sec.path, sec.name, firstDifference(string(have), string(want)))
		}
	}
}

// TestSplice replaces what lies between the markers, whatever it was, and
// refuses a file whose markers are missing or out of order.
func TestSplice(t *testing.T) {
	sec := section{path: "x.md", name: "table", source: "the test", gen: func() []byte { return []byte("| a |\n") }}
	doc := "# Title\n\n<!-- BEGIN GENERATED table -->\nold\nrows\n<!-- END GENERATED table -->\nafter\n"
	got, err := sec.splice([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := "# Title\n\n" + sec.begin() + "\n| a |\n" + sec.end() + "\nafter\n"
	if string(got) != want {
		t.Fatalf("spliced\n%s\nwant\n%s", got, want)
	}
	if again, err := sec.splice(got); err != nil || !bytes.Equal(again, got) {
		t.Fatalf("splicing again changed the file (%v):\n%s", err, again)
	}
	for name, bad := range map[string]string{
		"no begin":      "<!-- END GENERATED table -->\n",
		"no end":        "<!-- BEGIN GENERATED table -->\n",
		"end first":     "<!-- END GENERATED table -->\n<!-- BEGIN GENERATED table -->\n",
		"begins twice":  "<!-- BEGIN GENERATED table -->\n<!-- BEGIN GENERATED table -->\n<!-- END GENERATED table -->\n",
		"another table": "<!-- BEGIN GENERATED tables -->\n<!-- END GENERATED tables -->\n",
	} {
		if _, err := sec.splice([]byte(bad)); err == nil {
			t.Errorf("%s: spliced", name)
		}
	}
}

// firstDifference names the first line where the committed file differs
// from the generated one.
func firstDifference(have, want string) string {
	hl, wl := strings.Split(have, "\n"), strings.Split(want, "\n")
	for i := 0; i < max(len(hl), len(wl)); i++ {
		var h, w string
		if i < len(hl) {
			h = hl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if h != w {
			return "first difference at line " + strconv.Itoa(i+1) + ":\n  committed: " + h + "\n  generated: " + w
		}
	}
	return ""
}

// TestEverythingIsDocumented checks that the generated text names every key,
// environment variable, handler field and metric the code defines.
func TestEverythingIsDocumented(t *testing.T) {
	conf := string(configurationDoc())
	for _, k := range config.Keys() {
		if !strings.Contains(conf, "| `"+k.Path+"` |") {
			t.Errorf("configuration.md lacks key %s", k.Path)
		}
	}
	for _, env := range config.EnvVars() {
		if !strings.Contains(conf, "`"+env+"`") {
			t.Errorf("configuration.md lacks environment variable %s", env)
		}
	}
	reg := handler.Default()
	if len(reg.Names()) == 0 {
		t.Fatal("no built-in handlers registered")
	}
	for _, name := range reg.Names() {
		if !strings.Contains(conf, "### `"+name+"`") {
			t.Errorf("configuration.md lacks handler type %s", name)
		}
		spec, _ := reg.Lookup(name)
		for _, f := range handlerconfig.Fields(spec) {
			if !strings.Contains(conf, "| `"+f.Name+"` |") {
				t.Errorf("configuration.md lacks %s's key %s", name, f.Name)
			}
		}
	}
	met := string(metricsDoc())
	for _, d := range metrics.Catalog() {
		if !strings.Contains(met, "| `"+d.Name+"` | "+d.Type+" |") {
			t.Errorf("metrics.md lacks %s (%s)", d.Name, d.Type)
		}
	}
	table := string(responseActionsTable())
	for _, r := range handlers.ResponseActions() {
		if !strings.Contains(table, "| "+r.Response+" | ") {
			t.Errorf("the response → action table lacks the row %q", r.Response)
		}
	}
	for _, s := range []string{"wowd_kafka", "client_id", "Label cardinality"} {
		if !strings.Contains(met, s) {
			t.Errorf("metrics.md does not mention %s", s)
		}
	}
}

func TestCellEscapes(t *testing.T) {
	if got := cell("<prefix>.<command|event>"); got != `&lt;prefix&gt;.&lt;command\|event&gt;` {
		t.Errorf("cell: %s", got)
	}
	if got := keyDefault("every context"); got != "every context" {
		t.Errorf("keyDefault prose: %s", got)
	}
	if got := keyDefault("{topic}.dlq"); got != "`{topic}.dlq`" {
		t.Errorf("keyDefault literal: %s", got)
	}
}
