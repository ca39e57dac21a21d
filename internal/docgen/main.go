// Command docgen writes the generated references docs/configuration.md and
// docs/metrics.md, and the generated sections of hand-written documents
// (the response → action table of internal/handlers/HTTP.md), from the
// code's own definitions: the configuration key table (config.Keys), the
// handler registry (handler.Fields), the metric descriptors
// (metrics.Catalog) and the http sink's response rules
// (handlers.ResponseActions). `make docs` runs it from the repository root:
//
//	go run ./internal/docgen -out docs
//
// Its test fails when the committed files differ from what it would write.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
	"github.com/wowd/wowd/internal/handlerconfig"
	"github.com/wowd/wowd/internal/handlers" // the built-in handlers register themselves
	"github.com/wowd/wowd/internal/metrics"
)

// generated names the files docgen owns, with their generators.
var generated = []struct {
	name string
	gen  func() []byte
}{
	{"configuration.md", configurationDoc},
	{"metrics.md", metricsDoc},
}

// section is a generated part of a hand-written file: docgen replaces the
// lines between its begin and end marker lines, which the file holds once
// each, and leaves the rest of the file alone.
type section struct {
	path   string // from the repository root, slash-separated
	name   string // in the markers
	source string // what it is generated from, for the begin marker
	gen    func() []byte
}

// sections names the generated sections of hand-written files.
var sections = []section{
	{"internal/handlers/HTTP.md", "response-actions", "the http sink's responseRules (internal/handlers/http_action.go)", responseActionsTable},
}

func main() {
	out := flag.String("out", "docs", "directory to write configuration.md and metrics.md to")
	root := flag.String("root", ".", "repository root, where the files with generated sections are")
	flag.Parse()
	if err := write(*out); err != nil {
		fmt.Fprintln(os.Stderr, "docgen:", err)
		os.Exit(1)
	}
	if err := writeSections(*root); err != nil {
		fmt.Fprintln(os.Stderr, "docgen:", err)
		os.Exit(1)
	}
}

// write generates every file into dir.
func write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, g := range generated {
		if err := os.WriteFile(filepath.Join(dir, g.name), g.gen(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// writeSections regenerates the sections of the files under root.
func writeSections(root string) error {
	for _, sec := range sections {
		path := filepath.Join(root, filepath.FromSlash(sec.path))
		old, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("%w (run docgen from the repository root, or pass -root)", err)
		}
		doc, err := sec.splice(old)
		if err != nil {
			return fmt.Errorf("%s: %w", sec.path, err)
		}
		if bytes.Equal(doc, old) {
			continue
		}
		if err := os.WriteFile(path, doc, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// begin and end are the marker lines of sec.
func (sec section) begin() string {
	return "<!-- BEGIN GENERATED " + sec.name + ": written by `make docs` from " + sec.source +
		". Do not edit: change the code and run make docs. -->"
}

func (sec section) end() string { return "<!-- END GENERATED " + sec.name + " -->" }

// splice returns doc with the lines between the markers of sec replaced by
// what sec generates, and its begin marker written out in full.
func (sec section) splice(doc []byte) ([]byte, error) {
	lines := strings.SplitAfter(string(doc), "\n")
	begin, end := -1, -1
	for i, l := range lines {
		l = strings.TrimRight(l, "\r\n")
		switch {
		case isMarker(l, "<!-- BEGIN GENERATED "+sec.name):
			if begin >= 0 {
				return nil, fmt.Errorf("section %s begins twice (lines %d and %d)", sec.name, begin+1, i+1)
			}
			begin = i
		case isMarker(l, "<!-- END GENERATED "+sec.name):
			if end >= 0 {
				return nil, fmt.Errorf("section %s ends twice (lines %d and %d)", sec.name, end+1, i+1)
			}
			end = i
		}
	}
	switch {
	case begin < 0:
		return nil, fmt.Errorf("no line %q", "<!-- BEGIN GENERATED "+sec.name+" -->")
	case end < 0:
		return nil, fmt.Errorf("no line %q", sec.end())
	case end < begin:
		return nil, errors.New("section " + sec.name + " ends before it begins")
	}
	var b bytes.Buffer
	b.WriteString(strings.Join(lines[:begin], ""))
	b.WriteString(sec.begin() + "\n")
	b.Write(sec.gen())
	b.WriteString(sec.end() + "\n")
	b.WriteString(strings.Join(lines[end+1:], ""))
	return b.Bytes(), nil
}

// isMarker reports whether line is the marker that starts with prefix: the
// prefix alone, or followed by a space or a colon and more.
func isMarker(line, prefix string) bool {
	rest, ok := strings.CutPrefix(line, prefix)
	return ok && (rest == "" || rest[0] == ' ' || rest[0] == ':')
}

// responseActionsTable is the http sink's response → action table, for
// internal/handlers/HTTP.md: its rows are Markdown already.
func responseActionsTable() []byte {
	var b bytes.Buffer
	b.WriteString("| Response | Outcome |\n")
	b.WriteString("|---|---|\n")
	for _, r := range handlers.ResponseActions() {
		outcome := r.Note
		if r.Outcome != "" {
			outcome = "**" + r.Outcome + "**"
			if r.Note != "" {
				outcome += ": " + r.Note
			}
		}
		fmt.Fprintf(&b, "| %s | %s |\n", markdownCell(r.Response), markdownCell(outcome))
	}
	return b.Bytes()
}

// markdownCell keeps Markdown text inside one table cell: a pipe would split
// the cell, a line break end the row.
func markdownCell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

const header = "<!-- Generated by `make docs` (go run ./internal/docgen) from the code's own definitions. Do not edit: change the code and run make docs. -->\n\n"

// configurationDoc is docs/configuration.md: every fixed key, then every
// built-in handler type's keys.
func configurationDoc() []byte {
	var b bytes.Buffer
	b.WriteString("# Configuration reference\n\n")
	b.WriteString(header)
	b.WriteString(`wowd reads one YAML file: ` + "`wowd run --config FILE`" + `, or the file named by
the ` + "`WOWD_CONFIG`" + ` environment variable. Every key lives under ` + "`wow`" + `. Decoding is
strict: an unknown key is an error naming the key, and every error is reported
at once with its key path. Check a file with ` + "`wowd config validate --config FILE`" + `
(exit code 2 on any error); like ` + "`wowd run`" + `, it opens every file the configuration
names (the value of each key ending in ` + "`-file`" + `, a handler's included: CA and
certificate files must hold a PEM certificate, key files a PEM private key
that goes with its certificate, token, password and header files must not be
empty) and reports those that cannot be used with the other problems, and it checks
the environment variables the ` + "`http`" + ` sink's ` + "`headers-from-env`" + ` names, as the sink
reads them at start, and, with tracing on, ` + "`OTEL_RESOURCE_ATTRIBUTES`" + `. ` + "`--no-files`" + ` leaves both out, for a file meant for another machine. A relative file
name is relative to the working directory. Print the effective configuration, defaults
filled in and secrets masked, with ` + "`wowd config print --config FILE`" + `. ` + "`config print`" + `,
` + "`rewind`" + ` and ` + "`parked`" + ` open none of those files up front (they run from an
operator's machine, and rewind while the daemon is down); the Kafka client's files,
which rewind and parked use, are reported as configuration errors when they build it.
` + "`configs/wowd.yaml`" + ` is a commented example with every key.

## Sources

Each value comes from the first of these that sets it:

1. ` + "`--set key=value`" + ` on the command line (every command that reads a
   configuration takes it, repeatable);
2. a ` + "`WOW_*`" + ` environment variable;
3. the file;
4. the default.

Environment variables override the scalar and list keys outside ` + "`contexts`" + ` and
` + "`dispatchers`" + `: ` + "`WOW_`" + ` followed by the path after ` + "`wow.`" + ` in upper case, with
dots and dashes turned into underscores (` + "`WOW_DISPATCH_WORKERS=8`" + `). Lists are
comma-separated (` + "`WOW_KAFKA_BOOTSTRAP_SERVERS=a:9092,b:9092`" + `). Durations use Go's
syntax: ` + "`500ms`, `30s`, `1m`, `1h30m`" + `. A value that is not valid UTF-8 is a
configuration error, as it is in the file. A ` + "`WOW_*`" + ` variable that names no key but
is within two typing mistakes of one (a typo such as ` + "`WOW_DISPATCH_WORKRS`" + `) is a configuration
error naming it and the variable it is close to. Other ` + "`WOW_*`" + ` variables are not wowd's to
refuse and are left alone: Kubernetes' service links of a Service named ` + "`wow-…`" + `
(` + "`WOW_INGEST_PORT`, `WOW_WOWD_SERVICE_HOST`, `WOW_WOWD_PORT_9464_TCP_ADDR`" + `), a Wow
service's Spring properties (` + "`WOW_MONGO_ENABLED`" + `), and the Spring form of one of wowd's
keys, dashes dropped (` + "`WOW_KAFKA_BOOTSTRAPSERVERS`" + `, which wowd does not read: it reads
` + "`WOW_KAFKA_BOOTSTRAP_SERVERS`" + `). ` + "`WOWD_*`" + ` variables
(` + "`WOWD_CONFIG`" + `) are not keys and are not checked. An empty variable is ignored: it cannot clear a key the
file sets (a variable defined from an unset one is empty); use
` + "`--set key=`" + ` or ` + "`--set key=null`" + ` (the default) for that.

` + "`--set`" + ` reaches any key, those of dispatchers and handlers included, with Helm's
syntax in its simple cases: ` + "`--set wow.dispatchers.cart.handler.request-timeout=5s`" + `;
several pairs in one argument separated by commas (` + "`a=1,b=2`" + `); a list in braces
(` + "`--set wow.kafka.bootstrap-servers={a:9092,b:9092}`" + `); one item by index
(` + "`wow.contexts.shop.aggregates[0]=cart`" + `); a map entry as one more key element
(` + "`wow.dispatchers.cart.handler.headers.X-Tenant=acme`" + `); ` + "`null`" + ` to remove a key
of the file, leaving its default; a backslash before a comma, a dot or a brace that
is part of a key or value. A ` + "`--set`" + ` key is checked as strictly as the file: one
that does not exist is an error naming the argument and the closest key. Errors name
a ` + "`--set`" + ` pair by its key, never its value, which may be a secret. A handler key that
takes text (a string, or a map of strings such as ` + "`headers`" + `) keeps the text written,
from ` + "`--set`" + ` and from the file alike: ` + "`headers.X-Tenant=42`" + ` is the header ` + "`42`" + ` and
` + "`token: 0012345`" + ` the token ` + "`0012345`" + `, where YAML alone would read numbers.

` + "`wowd config print`" + ` follows each value with a comment saying where it came from:
` + "`# default`" + `, ` + "`# FILE:LINE`" + `, ` + "`# env WOW_LOG_LEVEL`" + ` or ` + "`# --set`" + ` (` + "`--plain`" + `
leaves them out), and each dispatcher with the consumer groups its receivers
join (` + "`# consumer groups: carts.projection.example`" + `).

`)
	b.WriteString(reloadSection())
	b.WriteString("## Keys\n\n")
	b.WriteString("`<name>` stands for a key of the enclosing map: a bounded context's or a dispatcher's name.\n\n")
	b.WriteString("| Key | Type | Default | Environment | Description |\n")
	b.WriteString("|---|---|---|---|---|\n")
	for _, k := range config.Keys() {
		env := "—"
		if k.Env != "" {
			env = code(k.Env)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", code(k.Path), cell(k.Type), keyDefault(k.Default), env, cell(k.Description))
	}

	reg := handler.Default()
	b.WriteString("\n## Handler types\n\n")
	b.WriteString("`wow.dispatchers.<name>.handler.type` selects the handler of a dispatcher; the other keys of\n")
	b.WriteString("`wow.dispatchers.<name>.handler` configure it, as listed below. `wowd handlers` prints the same\n")
	b.WriteString("list from the binary, including handlers compiled into a custom build. Keys marked secret are\n")
	b.WriteString("masked by `wowd config print`.\n")
	for _, name := range reg.Names() {
		spec, _ := reg.Lookup(name)
		fmt.Fprintf(&b, "\n### `%s`\n\n", name)
		if spec.Summary != "" {
			b.WriteString(spec.Summary + "\n\n")
		}
		fields := handlerconfig.Fields(spec)
		if len(fields) == 0 {
			b.WriteString("Takes no configuration.\n")
			continue
		}
		b.WriteString("| Key | Type | Default | Required | Secret | Description |\n")
		b.WriteString("|---|---|---|---|---|---|\n")
		for _, f := range fields {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", code(f.Name), cell(f.Type), fieldDefault(f),
				yesNo(f.Required), yesNo(f.Secret), cell(f.Description))
		}
	}
	return b.Bytes()
}

// reloadSection says what `wowd run` applies when its file changes, listing
// the keys from their definitions.
func reloadSection() string {
	var keys []string
	for _, k := range config.Keys() {
		if k.Reload {
			keys = append(keys, code(k.Path))
		}
	}
	reg := handler.Default()
	for _, name := range reg.Names() {
		spec, _ := reg.Lookup(name)
		for _, f := range handlerconfig.Fields(spec) {
			if f.Reload {
				keys = append(keys, code("wow.dispatchers.<name>.handler."+f.Name)+" ("+name+")")
			}
		}
	}
	return `## Reload while running

` + "`wowd run`" + ` watches its configuration file (its directory, so a file replaced by an
editor or a Kubernetes ConfigMap update counts, and, when the path is a link to a file
in another directory, that directory too, so an edit of that file in place counts; a
change made while wowd starts counts as well, and so does an overflow of the kernel's
queue of file events, which may have lost one) and, once the file has been still
for 200ms, reads it again over the same environment and ` + "`--set`" + ` arguments. These
keys apply without a restart:

- ` + strings.Join(keys, "\n- ") + `

Each attempt of the http sink (one request, of one message or of a batch) reads its
settings once when it starts and keeps them to its end: one waiting for the rate
limiter or in flight when a reload lands keeps its timeout and header files, and the
next attempt takes the new ones. The rate limit is the sink's, changed in place: an
attempt waiting for it waits under the new rate and burst, so the two never add up. A raised ` + "`max-concurrency`" + ` starts queued
requests at once, a lowered one holds once enough requests in flight ended. (The
contents of the header files are read again within a second of a change anyway.) A
change of any other key is logged as needing a restart, naming the keys, and is not
applied (the reloadable keys of the same file are). A file that does not load or
validate, or whose new header files cannot be read, is refused whole and logged with
every problem; the running configuration stays. (A header file the sink reads already,
under the same header name, is not read again for a reload: while it cannot be used,
the sink keeps its last good value, and a reload of the other keys applies.) ` + "`handler.timeout`" + ` is not among
them: each receiver sizes its deadline checks from it when it starts. Each change read
is counted in
` + "`wowd_config_reloads_total{outcome}`" + ` (` + "`applied`, `restart_needed`, `invalid`, `retrying`, and `unchanged`" + ` for a file read again, after
a change or a SIGHUP, whose keys all stay as they run: a comment edited, a change reverted).

A refusal for what the file says (a key unknown or out of range, a request-timeout that
does not fit the handler.timeout and the batch.linger wowd started with, whatever
the file says of those two, which take a restart) stands until the file
changes again. A refusal for a reason outside it may pass while the file stays as it
is, and the file is read again after 1s, then twice as long each time up to a minute,
until it applies or changes: the file or a header file it names cannot be read (a
secret mounted a moment after the ConfigMap changed), or ` + "`wow.metadata`" + ` cannot be
read or disagrees with the file. Such a refusal is logged and counted as ` + "`retrying`" + `
(not ` + "`invalid`" + `) once per distinct error while it is retried, and again for each
new change of the file or SIGHUP that meets it. A stop ends a reload under way (a read of
` + "`wow.metadata`" + ` included) without applying it.

` + "`SIGHUP`" + ` makes ` + "`wowd run`" + ` read the file at once, as for a change, even if it did
not change: once what a reload was refused for is fixed outside the file, the
reload need not wait for its retry, nor for the file to change. It never stops
wowd; ` + "`wowd dev`" + `, which watches no file, logs that there is nothing to reload.

`
}

// metricsDoc is docs/metrics.md: every wowd_ metric, then the Kafka client's
// metrics and the label rules.
func metricsDoc() []byte {
	var b bytes.Buffer
	b.WriteString("# Metrics reference\n\n")
	b.WriteString(header)
	b.WriteString(`wowd serves Prometheus metrics on ` + "`http://<wow.metrics.listen>/metrics`" + ` (default
` + "`127.0.0.1:9464`" + `; in a container ` + "`0.0.0.0:9464`" + `), next to ` + "`/healthz`" + ` (liveness:
200 while the process runs) and ` + "`/readyz`" + ` (readiness: 200 once every receiver
has joined its consumer group, 503 with the reasons otherwise and while
stopping). The Grafana dashboard in ` + "`deploy/grafana/`" + ` and the alert rules in
` + "`deploy/prometheus/`" + ` use these metrics; ` + "`docs/operations.md`" + ` explains how to read them.

## wowd metrics

A receiver is one dispatcher's consumer of one bounded context, so the
receiver gauges carry ` + "`dispatcher`" + ` and ` + "`context`" + `. Gauges of receivers and of the
executor are read at scrape time. Histograms are exported as the usual
` + "`_bucket`" + `, ` + "`_sum`" + ` and ` + "`_count`" + ` series.

| Metric | Type | Labels | Help |
|---|---|---|---|
`)
	for _, d := range metrics.Catalog() {
		labels := "—"
		if len(d.Labels) > 0 {
			ls := make([]string, len(d.Labels))
			for i, l := range d.Labels {
				ls[i] = code(l)
			}
			labels = strings.Join(ls, ", ")
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", code(d.Name), d.Type, labels, cell(d.Help))
	}
	b.WriteString(`
## Kafka client metrics (` + "`wowd_kafka_*`" + `)

Each receiver has its own franz-go client, named ` + "`<wow.kafka.client-id>-<dispatcher>-<context alias>`" + `;
the ingest endpoint's producer is ` + "`<wow.kafka.client-id>-ingest`" + `.
The clients' metrics come from franz-go's kprom plugin with the namespace
` + "`wowd_kafka`" + ` and the label ` + "`client_id`" + `; per-broker series add ` + "`node_id`" + ` (` + "`seed_0`" + `,
` + "`seed_1`" + `… for the bootstrap connections, the broker's node ID after that) and the
fetch and produce byte counters add ` + "`topic`" + `. Among them:

| Metric | Meaning |
|---|---|
| ` + "`wowd_kafka_connects_total`" + ` | connections opened |
| ` + "`wowd_kafka_connect_errors_total`" + ` | connection attempts that failed |
| ` + "`wowd_kafka_disconnects_total`" + ` | connections closed |
| ` + "`wowd_kafka_read_errors_total`" + `, ` + "`wowd_kafka_write_errors_total`" + ` | failed reads from and writes to a broker connection |
| ` + "`wowd_kafka_read_bytes_total`" + `, ` + "`wowd_kafka_write_bytes_total`" + ` | bytes read from and written to brokers |
| ` + "`wowd_kafka_fetch_bytes_total`" + ` | uncompressed bytes fetched, per topic |
| ` + "`wowd_kafka_buffered_fetch_records_total`" + `, ` + "`wowd_kafka_buffered_fetch_bytes`" + ` | records and bytes fetched but not yet polled, decompressed (the fetch limits count compressed bytes: bounded by them times the compression, and by the memory budget) |
| ` + "`wowd_kafka_produce_bytes_total`" + ` | uncompressed bytes produced, per topic: dead letters, parked-aggregate state, ingest |
| ` + "`wowd_kafka_buffered_produce_records_total`" + `, ` + "`wowd_kafka_buffered_produce_bytes`" + ` | records and bytes waiting in the client to be produced (0 on a client that only consumes) |

A counter with per-broker labels appears only after its first event: the
error counters are absent from a healthy process. An expression over them has
no result until the first error (an alert on them stays quiet, as it should);
a graph that should show zero adds ` + "`or vector(0)`" + `.

The Go runtime's (` + "`go_*`" + `) and the process's (` + "`process_*`" + `) standard collectors are
exported too, and the metrics endpoint's own count of the scrapes it failed to
serve, ` + "`promhttp_metric_handler_errors_total`" + ` (label ` + "`cause`" + `: ` + "`gathering`" + ` or
` + "`encoding`" + `). ` + "`wowd_config_reloads_total`" + ` exists only while a configuration file is
watched (not under ` + "`wowd dev`" + `), ` + "`wowd_ingest_*`" + ` only with the ingest enabled.

## Label cardinality

Every label value comes from a bounded set, so the number of series depends on
the configuration, never on the traffic:

- ` + "`dispatcher`" + ` and ` + "`context`" + `: names from the configuration (one receiver per
  dispatcher and bounded context);
- ` + "`handler`" + `: a handler type name; ` + "`version`" + `: the build;
- ` + "`outcome`" + `, ` + "`result`" + `, ` + "`event`" + ` and ` + "`state`" + `: the fixed values listed in the help
  texts above;
- ` + "`client_id`" + `, ` + "`node_id`" + ` and ` + "`topic`" + ` (Kafka client): one client per receiver, the
  cluster's brokers and the consumed topics.

Aggregate IDs, record keys, partitions, offsets, URLs and error texts never
become labels. Per-aggregate problems show as bounded figures instead: the
largest backlog of a single aggregate ID is ` + "`wowd_receiver_max_key_backlog`" + `, and
the logs name the record.
`)
	return b.Bytes()
}

// cell escapes text for a Markdown table cell: pipes would split the cell,
// angle brackets would read as HTML.
func cell(s string) string {
	if s == "" {
		return "—"
	}
	return strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;", "\n", " ").Replace(s)
}

// code formats s as a code span inside a table cell.
func code(s string) string {
	return "`" + strings.ReplaceAll(s, "|", `\|`) + "`"
}

// keyDefault formats a documented default: a literal value as code, a
// description of a computed default ("every context") as text.
func keyDefault(s string) string {
	switch {
	case s == "":
		return "—"
	case strings.Contains(s, " "):
		return cell(s)
	}
	return code(s)
}

// fieldDefault formats a handler field's default. handler.Fields leaves the
// default empty when it is the type's zero value.
func fieldDefault(f handlerconfig.Field) string {
	switch {
	case f.Default != "":
		return code(f.Default)
	case f.Required:
		return "—"
	case f.Type == "bool":
		return code("false")
	case strings.HasPrefix(f.Type, "int"), strings.HasPrefix(f.Type, "uint"), strings.HasPrefix(f.Type, "float"):
		return code("0")
	case f.Type == "duration":
		return code("0s")
	}
	return "—"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
