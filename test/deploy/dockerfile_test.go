package deploy

import (
	"bytes"
	"debug/elf"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// readDockerfile parses the Dockerfile with BuildKit's own parser and
// returns its stages. Any parser or lint warning BuildKit would print fails
// the test. The words of each command are expanded as a build without
// --build-arg expands them: quotes removed, $VAR replaced from the ARG
// defaults and ENV values in scope.
func readDockerfile(t *testing.T) []instructions.Stage {
	t.Helper()
	f, err := os.Open(path("Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := parser.Parse(f)
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	for _, w := range res.Warnings {
		t.Errorf("Dockerfile:%d: %s", w.Location.Start.Line, w.Short)
	}
	lint := linter.New(&linter.Config{Warn: func(rule, _, _, msg string, loc []parser.Range) {
		t.Errorf("Dockerfile:%d: %s: %s", lineOf(loc), rule, msg)
	}})
	stages, metaArgs, err := instructions.Parse(res.AST, lint)
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stages, want a multi-stage build (build, then a minimal runtime)", len(stages))
	}

	lex := shell.NewLex(res.EscapeToken)
	expand := func(env map[string]string, loc []parser.Range) instructions.SingleWordExpander {
		return func(word string) (string, error) {
			vars := make([]string, 0, len(env))
			for k, v := range env {
				vars = append(vars, k+"="+v)
			}
			out, unset, err := lex.ProcessWord(word, shell.EnvsFromSlice(vars))
			for v := range unset {
				t.Errorf("Dockerfile:%d: %s uses $%s, which no ARG or ENV before it sets", lineOf(loc), word, v)
			}
			return out, err
		}
	}
	meta := map[string]string{}
	for _, a := range metaArgs {
		for _, kv := range a.Args {
			meta[kv.Key] = ""
			if kv.Value != nil {
				v, err := expand(meta, a.Location())(*kv.Value)
				if err != nil {
					t.Fatalf("Dockerfile:%d: %v", lineOf(a.Location()), err)
				}
				meta[kv.Key] = v
			}
		}
	}
	for i := range stages {
		s := &stages[i]
		if s.BaseName, err = expand(meta, s.Location)(s.BaseName); err != nil {
			t.Fatalf("Dockerfile:%d: %v", lineOf(s.Location), err)
		}
		env := map[string]string{}
		for _, c := range s.Commands {
			x := expand(env, c.Location())
			if a, ok := c.(*instructions.ArgCommand); ok {
				for _, kv := range a.Args {
					v := meta[kv.Key] // an ARG without a default takes the global one
					if kv.Value != nil {
						if v, err = x(*kv.Value); err != nil {
							t.Fatalf("Dockerfile:%d: %v", lineOf(c.Location()), err)
						}
					}
					env[kv.Key] = v
				}
				continue
			}
			if e, ok := c.(instructions.SupportsSingleWordExpansion); ok {
				if err := e.Expand(x); err != nil {
					t.Fatalf("Dockerfile:%d: %v", lineOf(c.Location()), err)
				}
			}
			if e, ok := c.(*instructions.EnvCommand); ok {
				for _, kv := range e.Env {
					env[kv.Key] = kv.Value
				}
			}
		}
	}
	return stages
}

// lineOf is the first line of a location in the Dockerfile.
func lineOf(loc []parser.Range) int {
	if len(loc) == 0 {
		return 0
	}
	return loc[0].Start.Line
}

// commands returns a stage's commands of type T, in order.
func commands[T instructions.Command](s instructions.Stage) []T {
	var out []T
	for _, c := range s.Commands {
		if c, ok := c.(T); ok {
			out = append(out, c)
		}
	}
	return out
}

// last returns the stage's last command of type T, the one Docker applies.
func last[T instructions.Command](s instructions.Stage) (T, bool) {
	all := commands[T](s)
	if len(all) == 0 {
		var zero T
		return zero, false
	}
	return all[len(all)-1], true
}

// execForm returns the argv of ENTRYPOINT or CMD, which must be in the exec
// (JSON array) form.
func execForm(t *testing.T, c instructions.Command, cl instructions.ShellDependantCmdLine) []string {
	t.Helper()
	if cl.PrependShell {
		t.Fatalf("Dockerfile:%d: %s: want the exec (JSON array) form so signals reach wowd", lineOf(c.Location()), c)
	}
	return cl.CmdLine
}

// TestDockerfile checks the image's invariants without a Docker engine.
func TestDockerfile(t *testing.T) {
	stages := readDockerfile(t)
	final := stages[len(stages)-1]

	// The build stage builds exactly as `make build` does.
	var build *instructions.Stage
	var makeBuild *instructions.RunCommand
	for i := range stages[:len(stages)-1] {
		for _, run := range commands[*instructions.RunCommand](stages[i]) {
			if regexp.MustCompile(`(^|\s)make build(\s|$)`).MatchString(strings.Join(run.CmdLine, " ")) {
				build, makeBuild = &stages[i], run
			}
		}
	}
	if build == nil {
		t.Fatal("no build stage runs `make build` (the flags must be the Makefile's: CGO_ENABLED=0, -trimpath, the version ldflags)")
	}
	if build.Name == "" {
		t.Errorf("the build stage (FROM %s) has no name", build.BaseName)
	}
	if !strings.Contains(strings.Join(makeBuild.CmdLine, " "), "VERSION=") {
		t.Errorf("the build stage's make build does not pass VERSION: the build context has no .git for git describe")
	}

	// A minimal base.
	if !strings.HasPrefix(final.BaseName, "gcr.io/distroless/static") && final.BaseName != "scratch" {
		t.Errorf("final base %s: want a minimal base (distroless static or scratch) for a static binary", final.BaseName)
	}

	// The binary comes from the build stage, from where make build puts it.
	var binary string
	for _, c := range commands[*instructions.CopyCommand](final) {
		if strings.EqualFold(c.From, build.Name) && len(c.SourcePaths) == 1 && c.SourcePaths[0] == "/src/bin/wowd" {
			binary = c.DestPath
		}
	}
	if binary == "" {
		t.Fatalf("the final stage does not COPY --from=%s the binary make build writes (bin/wowd)", build.Name)
	}
	if wd, ok := last[*instructions.WorkdirCommand](*build); !ok || wd.Path != "/src" {
		t.Errorf("the build stage's WORKDIR is not /src, where the COPY of bin/wowd expects it")
	}

	// Non-root, numerically.
	user, ok := last[*instructions.UserCommand](final)
	if !ok {
		t.Fatal("the final stage sets no USER: the image would run as root")
	}
	uid, _, _ := strings.Cut(user.User, ":")
	if !regexp.MustCompile(`^[1-9][0-9]*$`).MatchString(uid) {
		t.Errorf("USER %s: want a numeric non-zero uid, so Kubernetes' runAsNonRoot can verify it", user.User)
	}

	// The entry point runs wowd; the default command is `run` with the
	// configuration at /etc/wowd/wowd.yaml.
	ep, ok := last[*instructions.EntrypointCommand](final)
	if !ok {
		t.Fatal("no ENTRYPOINT")
	}
	argv := execForm(t, ep, ep.ShellDependantCmdLine)
	if len(argv) == 0 || argv[0] != binary {
		t.Errorf("ENTRYPOINT %v: want the copied binary %s first", argv, binary)
	}
	if cmd, ok := last[*instructions.CmdCommand](final); ok {
		argv = append(argv, execForm(t, cmd, cmd.ShellDependantCmdLine)...)
	}
	env := map[string]string{}
	for _, c := range commands[*instructions.EnvCommand](final) {
		for _, kv := range c.Env {
			env[kv.Key] = kv.Value
		}
	}
	if len(argv) < 2 || argv[1] != "run" {
		t.Errorf("ENTRYPOINT+CMD %v: want `wowd run`", argv)
	}
	const configPath = "/etc/wowd/wowd.yaml"
	configArg := ""
	for i, a := range argv {
		if a == "--config" && i+1 < len(argv) {
			configArg = argv[i+1]
		} else if v, ok := strings.CutPrefix(a, "--config="); ok {
			configArg = v
		}
	}
	switch {
	case configArg == configPath:
	case configArg == "" && env["WOWD_CONFIG"] == configPath:
	default:
		t.Errorf("the image's command %v (WOWD_CONFIG=%q) does not read %s", argv, env["WOWD_CONFIG"], configPath)
	}

	// The configuration the image carries, and the port it exposes.
	var configSrc string
	for _, c := range commands[*instructions.CopyCommand](final) {
		if c.From == "" && len(c.SourcePaths) == 1 && c.DestPath == configPath {
			configSrc = c.SourcePaths[0]
		}
	}
	if configSrc == "" {
		t.Fatalf("the final stage does not COPY a configuration to %s", configPath)
	}
	var cfg wowConfig
	readYAML(t, path(configSrc), &cfg)
	port := cfg.metricsPort(t)
	exposed := map[string]bool{}
	for _, c := range commands[*instructions.ExposeCommand](final) {
		for _, p := range c.Ports {
			exposed[strings.TrimSuffix(p, "/tcp")] = true
		}
	}
	if !exposed[port] || len(exposed) != 1 {
		t.Errorf("EXPOSE %v: want exactly the metrics port %s of %s (wow.metrics.listen %s)", exposed, port, configSrc, cfg.Wow.Metrics.Listen)
	}
	validateConfig(t, path(configSrc))

	// OCI labels.
	labels := map[string]string{}
	for _, c := range commands[*instructions.LabelCommand](final) {
		for _, kv := range c.Labels {
			labels[kv.Key] = kv.Value
		}
	}
	for _, k := range []string{"title", "description", "source", "version"} {
		if labels["org.opencontainers.image."+k] == "" {
			t.Errorf("no OCI label org.opencontainers.image.%s", k)
		}
	}
}

// TestDockerfileUserMatchesChart checks that the chart's securityContext
// runs as the image's user.
func TestDockerfileUserMatchesChart(t *testing.T) {
	stages := readDockerfile(t)
	var user string
	if c, ok := last[*instructions.UserCommand](stages[len(stages)-1]); ok {
		user = c.User
	}
	uid, _, _ := strings.Cut(user, ":")
	var values struct {
		PodSecurityContext struct {
			RunAsUser int `yaml:"runAsUser"`
		} `yaml:"podSecurityContext"`
	}
	readYAML(t, path("deploy/helm/wowd/values.yaml"), &values)
	if got := values.PodSecurityContext.RunAsUser; strings.TrimSpace(uid) != strconv.Itoa(got) {
		t.Errorf("chart podSecurityContext.runAsUser %d, image USER %s", got, user)
	}
}

// TestDockerBuildStage replays the Dockerfile's build stage without Docker:
// it copies the build context as .dockerignore filters it and runs the same
// make build there. A file the build needs but the context lacks, or flags
// that stop producing a static, path-free binary, fail here.
func TestDockerBuildStage(t *testing.T) {
	needTool(t, "make", "apt-get install make")
	wowdBinary(t) // compiles the packages with make build's flags first
	ctxDir := t.TempDir()
	copied := buildContext(t, root, ctxDir)
	for _, need := range []string{"go.mod", "go.sum", "Makefile", "cmd/wowd", "deploy/wowd.container.yaml"} {
		if _, err := os.Stat(filepath.Join(ctxDir, need)); err != nil {
			t.Fatalf(".dockerignore leaves %s out of the build context", need)
		}
	}
	for _, gone := range []string{".git", ".cache", "bin"} {
		if _, err := os.Stat(filepath.Join(ctxDir, gone)); err == nil {
			t.Errorf(".dockerignore keeps %s in the build context", gone)
		}
	}
	t.Logf("build context: %d files", copied)

	began := time.Now()
	cmd := exec.Command("make", "build", "VERSION=docker-check")
	cmd.Dir = ctxDir
	cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build in the build context: %v\n%s", err, out)
	}
	t.Logf("make build in the build context: %s", time.Since(began).Round(time.Millisecond))
	bin := filepath.Join(ctxDir, "bin", "wowd")
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "wowd docker-check" {
		t.Errorf("bin/wowd version: %q, %v; want the VERSION stamped by ldflags", out, err)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("bin/wowd has a program interpreter: not a static binary (CGO_ENABLED=0?)")
		}
	}
	raw, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(ctxDir)) {
		t.Error("bin/wowd contains its build directory: built without -trimpath")
	}
}

// buildContext copies the directory src to dst as Docker sends it as a build
// context: without what src/.dockerignore excludes, read and matched by the
// code the Docker CLI and BuildKit use. It returns the number of files
// copied.
func buildContext(t *testing.T, src, dst string) int {
	t.Helper()
	f, err := os.Open(filepath.Join(src, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	patterns, err := ignorefile.ReadAll(f)
	f.Close()
	if err != nil {
		t.Fatalf(".dockerignore: %v", err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatalf(".dockerignore: %v", err)
	}
	copied := 0
	dirs := map[string]patternmatcher.MatchInfo{} // by directory
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == src {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		ignored, info, err := pm.MatchesUsingParentResults(filepath.ToSlash(rel), dirs[filepath.Dir(p)])
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs[p] = info
		}
		out := filepath.Join(dst, rel)
		switch {
		case ignored && d.IsDir() && !pm.Exclusions():
			return filepath.SkipDir
		case ignored: // a "!" pattern may bring back something below
		case d.IsDir():
			return os.MkdirAll(out, 0o755)
		case d.Type().IsRegular():
			copied++
			return copyFile(p, out)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return copied
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, st.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// TestDockerignorePatterns checks buildContext on a tree of its own: the
// last matching pattern decides, "!" re-includes (even below an excluded
// directory), and a pattern matching a directory excludes what is in it.
func TestDockerignorePatterns(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	ignore := "# a comment\n.git\n**/*.test\n\n*.md\ndeploy/helm\n!deploy/helm/keep\n"
	if err := os.WriteFile(filepath.Join(src, ".dockerignore"), []byte(ignore), 0o644); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{ // path: ignored
		".git/config":           true,
		"x.test":                true,
		"a/b/x.test":            true,
		"README.md":             true,
		"docs/README.md":        false,
		"deploy/helm/wowd/a":    true,
		"deploy/helm/keep":      false,
		"deploy/wowd.container": false,
		"go.mod":                false,
	}
	for rel := range want {
		p := filepath.Join(src, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want[".git"] = true
	buildContext(t, src, dst)
	for rel, ignored := range want {
		_, err := os.Stat(filepath.Join(dst, filepath.FromSlash(rel)))
		if got := err != nil; got != ignored {
			t.Errorf("%s ignored = %v, want %v", rel, got, ignored)
		}
	}
}
