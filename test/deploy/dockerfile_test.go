package deploy

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
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
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, COPY...
	args string
	line int
}

// stage is one FROM and the instructions after it.
type stage struct {
	from, name string
	ins        []instruction
}

// parseDockerfile splits a Dockerfile into stages. ARGs before the first
// FROM are kept in a stage with an empty from.
func parseDockerfile(t *testing.T, text string) []stage {
	t.Helper()
	stages := []stage{{}}
	var cur strings.Builder
	start := 0
	sc := bufio.NewScanner(strings.NewReader(text))
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue // comments may sit between continuation lines too
		}
		if cur.Len() == 0 {
			start = n
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(cont + " ")
			continue
		}
		cur.WriteString(line)
		full := cur.String()
		cur.Reset()
		cmd, args, _ := strings.Cut(full, " ")
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: start}
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			s := stage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
			continue
		}
		stages[len(stages)-1].ins = append(stages[len(stages)-1].ins, in)
	}
	if cur.Len() > 0 {
		t.Fatal("Dockerfile ends with a continuation line")
	}
	return stages[1:]
}

func (s stage) all(cmd string) []instruction {
	var out []instruction
	for _, in := range s.ins {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// last returns the stage's last instruction cmd, as Docker applies it.
func (s stage) last(cmd string) (instruction, bool) {
	all := s.all(cmd)
	if len(all) == 0 {
		return instruction{}, false
	}
	return all[len(all)-1], true
}

// execForm decodes the JSON array form of ENTRYPOINT and CMD.
func execForm(t *testing.T, in instruction) []string {
	t.Helper()
	var v []string
	if err := json.Unmarshal([]byte(in.args), &v); err != nil {
		t.Fatalf("line %d: %s %s: want the exec (JSON array) form so signals reach wowd: %v", in.line, in.cmd, in.args, err)
	}
	return v
}

// keyValues parses LABEL and ENV arguments: key=value pairs, values
// optionally double-quoted.
func keyValues(s string) map[string]string {
	out := map[string]string{}
	re := regexp.MustCompile(`([A-Za-z0-9_.\-]+)=("(?:[^"\\]|\\.)*"|\S+)`)
	for _, m := range re.FindAllStringSubmatch(s, -1) {
		out[m[1]] = strings.Trim(m[2], `"`)
	}
	return out
}

func readDockerfile(t *testing.T) []stage {
	t.Helper()
	b, err := os.ReadFile(path("Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	stages := parseDockerfile(t, string(b))
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stages, want a multi-stage build (build, then a minimal runtime)", len(stages))
	}
	return stages
}

// TestDockerfile checks the image's invariants without a Docker engine.
func TestDockerfile(t *testing.T) {
	stages := readDockerfile(t)
	final := stages[len(stages)-1]

	// The build stage builds exactly as `make build` does.
	var build *stage
	for i := range stages[:len(stages)-1] {
		for _, in := range stages[i].all("RUN") {
			if regexp.MustCompile(`(^|\s)make build(\s|$)`).MatchString(in.args) {
				build = &stages[i]
			}
		}
	}
	if build == nil {
		t.Fatal("no build stage runs `make build` (the flags must be the Makefile's: CGO_ENABLED=0, -trimpath, the version ldflags)")
	}
	if build.name == "" {
		t.Errorf("the build stage (FROM %s) has no name", build.from)
	}
	if !regexp.MustCompile(`VERSION=`).MatchString(build.all("RUN")[len(build.all("RUN"))-1].args) {
		t.Errorf("the build stage's make build does not pass VERSION: the build context has no .git for git describe")
	}

	// A minimal base.
	if !strings.HasPrefix(final.from, "gcr.io/distroless/static") && final.from != "scratch" {
		t.Errorf("final base %s: want a minimal base (distroless static or scratch) for a static binary", final.from)
	}

	// The binary comes from the build stage, from where make build puts it.
	var binary string
	for _, in := range final.all("COPY") {
		f := strings.Fields(in.args)
		if len(f) == 3 && f[0] == "--from="+build.name && f[1] == "/src/bin/wowd" {
			binary = f[2]
		}
	}
	if binary == "" {
		t.Fatalf("the final stage does not COPY --from=%s the binary make build writes (bin/wowd)", build.name)
	}
	if wd := build.all("WORKDIR"); len(wd) == 0 || wd[len(wd)-1].args != "/src" {
		t.Errorf("the build stage's WORKDIR is not /src, where the COPY of bin/wowd expects it")
	}

	// Non-root, numerically.
	user, ok := final.last("USER")
	if !ok {
		t.Fatal("the final stage sets no USER: the image would run as root")
	}
	uid, _, _ := strings.Cut(user.args, ":")
	if !regexp.MustCompile(`^[1-9][0-9]*$`).MatchString(uid) {
		t.Errorf("USER %s: want a numeric non-zero uid, so Kubernetes' runAsNonRoot can verify it", user.args)
	}

	// The entry point runs wowd; the default command is `run` with the
	// configuration at /etc/wowd/wowd.yaml.
	ep, ok := final.last("ENTRYPOINT")
	if !ok {
		t.Fatal("no ENTRYPOINT")
	}
	argv := execForm(t, ep)
	if len(argv) == 0 || argv[0] != binary {
		t.Errorf("ENTRYPOINT %v: want the copied binary %s first", argv, binary)
	}
	if cmd, ok := final.last("CMD"); ok {
		argv = append(argv, execForm(t, cmd)...)
	}
	env := map[string]string{}
	for _, in := range final.all("ENV") {
		for k, v := range keyValues(in.args) {
			env[k] = v
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
	for _, in := range final.all("COPY") {
		f := strings.Fields(in.args)
		if len(f) == 2 && f[1] == configPath {
			configSrc = f[0]
		}
	}
	if configSrc == "" {
		t.Fatalf("the final stage does not COPY a configuration to %s", configPath)
	}
	var cfg wowConfig
	readYAML(t, path(configSrc), &cfg)
	port := cfg.metricsPort(t)
	exposed := map[string]bool{}
	for _, in := range final.all("EXPOSE") {
		for _, p := range strings.Fields(in.args) {
			exposed[strings.TrimSuffix(p, "/tcp")] = true
		}
	}
	if !exposed[port] || len(exposed) != 1 {
		t.Errorf("EXPOSE %v: want exactly the metrics port %s of %s (wow.metrics.listen %s)", exposed, port, configSrc, cfg.Wow.Metrics.Listen)
	}
	validateConfig(t, path(configSrc))

	// OCI labels.
	labels := map[string]string{}
	for _, in := range final.all("LABEL") {
		for k, v := range keyValues(in.args) {
			labels[k] = v
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
	user, _ := stages[len(stages)-1].last("USER")
	uid, _, _ := strings.Cut(user.args, ":")
	var values struct {
		PodSecurityContext struct {
			RunAsUser int `yaml:"runAsUser"`
		} `yaml:"podSecurityContext"`
	}
	readYAML(t, path("deploy/helm/wowd/values.yaml"), &values)
	if got := values.PodSecurityContext.RunAsUser; strings.TrimSpace(uid) != strconv.Itoa(got) {
		t.Errorf("chart podSecurityContext.runAsUser %d, image USER %s", got, user.args)
	}
}

// TestDockerBuildStage replays the Dockerfile's build stage without Docker:
// it copies the build context as .dockerignore filters it and runs the same
// make build there. A file the build needs but the context lacks, or flags
// that stop producing a static, path-free binary, fail here.
func TestDockerBuildStage(t *testing.T) {
	needTool(t, "make", "apt-get install make")
	wowdBinary(t) // compiles the packages with make build's flags first
	patterns := dockerignore(t)
	ctxDir := t.TempDir()
	copied := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if ignored(patterns, rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		dst := filepath.Join(ctxDir, filepath.FromSlash(rel))
		switch {
		case d.IsDir():
			return os.MkdirAll(dst, 0o755)
		case d.Type().IsRegular():
			copied++
			return copyFile(p, dst)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
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

// dockerignore reads the patterns of .dockerignore.
func dockerignore(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(path(".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		out = append(out, l)
	}
	return out
}

// ignored applies .dockerignore patterns to a slash-separated path relative
// to the context, as Docker does: the last matching pattern decides, "!"
// re-includes, and a pattern matching a directory excludes what is in it.
func ignored(patterns []string, rel string) bool {
	res := false
	for _, p := range patterns {
		neg := strings.HasPrefix(p, "!")
		p = strings.TrimPrefix(strings.TrimPrefix(p, "!"), "/")
		re := patternRegexp(p)
		match := re.MatchString(rel)
		for i := 0; !match && i < len(rel); i++ {
			if rel[i] == '/' {
				match = re.MatchString(rel[:i])
			}
		}
		if match {
			res = !neg
		}
	}
	return res
}

func patternRegexp(p string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case strings.HasPrefix(p[i:], "**/"):
			b.WriteString("(.*/)?")
			i += 2
		case strings.HasPrefix(p[i:], "**"):
			b.WriteString(".*")
			i++
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
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

func TestDockerignorePatterns(t *testing.T) {
	ps := []string{".git", "**/*.test", "*.md", "deploy/helm", "!deploy/helm/keep"}
	for rel, want := range map[string]bool{
		".git":                  true,
		".git/config":           true,
		"x.test":                true,
		"a/b/x.test":            true,
		"README.md":             true,
		"docs/README.md":        false,
		"deploy/helm/wowd/a":    true,
		"deploy/helm/keep":      false,
		"deploy/wowd.container": false,
		"go.mod":                false,
	} {
		if got := ignored(ps, rel); got != want {
			t.Errorf("ignored(%s) = %v, want %v", rel, got, want)
		}
	}
}
