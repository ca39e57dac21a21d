package config

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/wowd/wowd/internal/bearer"
	"github.com/wowd/wowd/internal/memory"
)

// The most of a named file the check reads: what its reader takes, so that
// a file the check passes is not refused at start, nor the other way round.
const (
	maxPEMFile     = 64 << 20 // certificates and keys: read whole by their readers; a bound against /dev/zero
	maxBearerFile  = 4096     // wow.admin and wow.ingest token files (internal/bearer)
	maxSASLFile    = 64 << 10 // wow.kafka.sasl password and token files (internal/daemon)
	maxHandlerFile = 16 << 10 // a handler's files, such as the http handler's headers-from-file (internal/handlers)
)

// fileLimit is the most of the file named by the key at path that its
// reader takes.
func fileLimit(path, key string) int {
	switch {
	case strings.HasSuffix(key, "ca-file") || strings.HasSuffix(key, "cert-file") || strings.HasSuffix(key, "key-file"):
		return maxPEMFile
	case strings.HasPrefix(path, "wow.kafka.sasl."):
		return maxSASLFile
	case strings.HasPrefix(path, "wow.dispatchers."):
		return maxHandlerFile
	default:
		return maxBearerFile
	}
}

// checkFiles opens every file the configuration names and reports each that
// cannot be used, with the other problems: the value of every key whose
// name ends in -file, fixed or a handler's (a mapping under such a key,
// like the http handler's headers-from-file, holds file names as values).
// CA and certificate files must hold a PEM certificate, key files a PEM
// private key that goes with the certificate next to it; the bearer token
// files of the ingest and admin listeners one word (bearer.Token); the
// others (Kafka's token and password, header values) must not be empty,
// and a handler's configuration that checks its files by rules of its own
// (fileBound) checks them by those. A key already reported is not opened.
// Relative names are relative to the working directory, as when wowd uses
// them.
func (d *decoder) checkFiles(c *Config) {
	fc := fileChecker{d: d, reported: map[string]bool{}, pems: map[string][]byte{}}
	for _, e := range d.errs {
		fc.reported[e.Path] = true
	}
	for _, f := range configFields {
		if f.ptr == nil || !strings.HasSuffix(f.name, "-file") {
			continue
		}
		if p, ok := f.ptr(c).(*string); ok && *p != "" {
			fc.check("wow."+f.name, f.name, *p)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Dispatchers)) {
		path := "wow.dispatchers." + name + ".handler"
		fc.walk(path, c.Dispatchers[name].Handler.Raw)
		if fb, ok := c.Dispatchers[name].Handler.Decoded.(fileBound); ok {
			fc.handlerFiles(path, fb)
		}
	}
	fc.pairs()
}

// fileBound is a handler configuration that reads files when its handler
// is built, and checks their content by rules of its own (the http sink's
// headers-from-file: a header value).
type fileBound interface {
	// CheckFiles reports the files whose content the handler would
	// refuse, as "key: problem", never quoting the content.
	CheckFiles() []error
}

// handlerFiles reports what the handler at path says of its files, but
// for the keys reported already: the files it could not read at all.
func (fc *fileChecker) handlerFiles(path string, fb fileBound) {
	for _, err := range fb.CheckFiles() {
		key, msg, ok := strings.Cut(err.Error(), ": ")
		switch {
		case !ok:
			fc.fail(path, "%v", err)
		case !fc.reported[path+"."+key]:
			fc.fail(path+"."+key, "%s", msg)
		}
	}
}

// fail reports a problem with the file named by the key at path.
func (fc *fileChecker) fail(path, format string, args ...any) {
	fc.d.outsidef(path, format, args...)
	fc.reported[path] = true
}

type fileChecker struct {
	d        *decoder
	reported map[string]bool   // key paths with a problem already
	pems     map[string][]byte // usable certificate and key files, by key path
}

// walk checks the files named in a handler's raw configuration m at path.
func (fc *fileChecker) walk(path string, m map[string]any) {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		p := path + "." + k
		switch v := m[k].(type) {
		case string:
			if strings.HasSuffix(k, "-file") && v != "" {
				fc.check(p, k, v)
			}
		case map[string]any:
			if !strings.HasSuffix(k, "-file") {
				fc.walk(p, v)
				continue
			}
			for _, h := range slices.Sorted(maps.Keys(v)) {
				if s, ok := v[h].(string); ok && s != "" {
					fc.check(p+"."+h, k, s)
				}
			}
		}
	}
}

// check reads file, named by the key at path whose last element is key.
// Its errors name the file, never its content.
func (fc *fileChecker) check(path, key, file string) {
	if fc.reported[path] {
		return
	}
	data, err := readLimited(file, fileLimit(path, key))
	if err != nil {
		fc.fail(path, "%v", err)
		return
	}
	switch {
	case strings.HasSuffix(key, "ca-file") || strings.HasSuffix(key, "cert-file"):
		if !x509.NewCertPool().AppendCertsFromPEM(data) {
			fc.fail(path, "%s holds no PEM certificate", file)
			return
		}
		fc.pems[path] = data
	case strings.HasSuffix(key, "key-file"):
		if !hasPrivateKey(data) {
			fc.fail(path, "%s holds no PEM private key", file)
			return
		}
		fc.pems[path] = data
	case path == "wow.ingest.token-file" || path == "wow.admin.token-file":
		if _, err := bearer.Token(data); err != nil {
			fc.fail(path, "%s %v", file, err)
		}
	default:
		if len(bytes.TrimSpace(data)) == 0 {
			fc.fail(path, "%s is empty", file)
		}
	}
}

// pairs checks that each usable key file goes with the usable certificate
// file next to it.
func (fc *fileChecker) pairs() {
	for _, path := range slices.Sorted(maps.Keys(fc.pems)) {
		prefix, ok := strings.CutSuffix(path, "key-file")
		if !ok {
			continue
		}
		cert, ok := fc.pems[prefix+"cert-file"]
		if !ok {
			continue
		}
		if _, err := tls.X509KeyPair(cert, fc.pems[path]); err != nil {
			fc.d.outsidef(path, "does not go with %scert-file: %v", prefix, err)
		}
	}
}

func readLimited(file string, limit int) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("reading %s: %w", file, err)
	case len(data) > limit:
		return nil, fmt.Errorf("%s is larger than %d bytes", file, limit)
	}
	return data, nil
}

// hasPrivateKey reports whether data holds a PEM block of a private key.
func hasPrivateKey(data []byte) bool {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return false
		}
		if strings.HasSuffix(b.Type, "PRIVATE KEY") {
			return true
		}
	}
}

// envBound is a handler configuration that reads environment variables
// when its handler is built (the http sink's headers-from-env).
type envBound interface {
	// CheckEnv reports the variables lookup does not give a usable value
	// for, as "key: problem", never quoting a value.
	CheckEnv(lookup func(string) (string, bool)) []error
}

// checkEnv reports, with the files, the environment variables a handler
// would refuse at start (the environment of env, in the form of
// os.Environ): wowd config validate checks what wowd run would.
func (d *decoder) checkEnv(c *Config, env []string) {
	vars := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	lookup := func(name string) (string, bool) { v, ok := vars[name]; return v, ok }
	d.checkTracingEnv(c, vars)
	d.checkMemory(c, vars)
	for _, name := range slices.Sorted(maps.Keys(c.Dispatchers)) {
		eb, ok := c.Dispatchers[name].Handler.Decoded.(envBound)
		if !ok {
			continue
		}
		path := "wow.dispatchers." + name + ".handler"
		for _, err := range eb.CheckEnv(lookup) {
			if key, msg, ok := strings.Cut(err.Error(), ": "); ok {
				d.outsidef(path+"."+key, "%s", msg)
				continue
			}
			d.outsidef(path, "%v", err)
		}
	}
}

// cgroupRoot is where the cgroup file system is mounted (a test's
// elsewhere).
var cgroupRoot = memory.CgroupRoot

// checkMemory reports a memory limit wowd run would refuse (below
// memory.MinLimit) when wow.memory.limit is empty, resolved as it resolves
// it, from the container's limit or GOMEMLIMIT of vars: the configured
// size is checked with the document.
func (d *decoder) checkMemory(c *Config, vars map[string]string) {
	if c.Memory.Limit != "" {
		return
	}
	n, src, err := memory.ResolveEnv("", cgroupRoot, func(name string) string { return vars[name] })
	switch {
	case err != nil:
		d.outsidef("wow.memory.limit", "empty, so the limit comes from the environment: %v", err)
	case n < memory.MinLimit:
		d.outsidef("wow.memory.limit", "empty, so the limit comes from %s: %d bytes, below the minimum of 32MiB; set wow.memory.limit", src, n)
	}
}

// checkTracingEnv reports a malformed OTEL_RESOURCE_ATTRIBUTES when tracing
// is on and OTEL_SDK_DISABLED does not turn it off: wowd run refuses it
// (package tracing's envDetector, with the same key=value rule as
// wow.tracing.resource-attributes).
func (d *decoder) checkTracingEnv(c *Config, vars map[string]string) {
	if !c.Tracing.Enabled || strings.EqualFold(strings.TrimSpace(vars["OTEL_SDK_DISABLED"]), "true") {
		return
	}
	for item := range strings.SplitSeq(vars["OTEL_RESOURCE_ATTRIBUTES"], ",") {
		if strings.TrimSpace(item) == "" {
			continue
		}
		if !keyValue(item) {
			d.outsidef("wow.tracing", "environment variable OTEL_RESOURCE_ATTRIBUTES: %q is not key=value", item)
		}
	}
}

// keyValue reports whether a resource attribute is key=value with a key
// (package tracing's rule, ParseResourceAttribute).
func keyValue(kv string) bool {
	k, _, ok := strings.Cut(kv, "=")
	return ok && strings.TrimSpace(k) != ""
}
