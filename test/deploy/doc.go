// Package deploy checks what ships in deploy/, the Dockerfile and the
// monitoring: the Dockerfile's invariants (no Docker engine is needed: it is
// parsed, and its build stage is replayed on a copy of the build context),
// the Compose file and the files it mounts, the Helm chart (linted and
// rendered with a helm built from the Go module proxy into .cache/bin; its
// KEDA ScaledObject validated against KEDA's CRD schema, checked in under
// testdata/schemas, with an OpenAPI checker of its own), the
// alert rules (promtool check rules and promtool test rules), and the
// dashboard and rules against a real Prometheus server scraping running wowd
// processes: every metric they reference must be exported.
//
// Tools that are missing (promtool, prometheus, helm when it cannot be
// built) make their tests skip, saying so; with CI=true they fail instead.
// Run the package with
//
//	go test -count=1 -v ./test/deploy/
//
// The package holds no code but this comment: everything is in its tests.
package deploy
