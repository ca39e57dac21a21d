package config_test

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/wowd/wowd/internal/config"
)

// FuzzParse parses arbitrary YAML with up to two WOW_* variables of
// arbitrary value and checks that Parse never panics and returns either a
// configuration or an *Errors, never both; that every problem names a key
// or a line of the file; that a problem a variable causes in a file that is
// valid without it names a key; that a valid configuration, printed as
// `wowd config print` prints it, parses again to the same configuration.
func FuzzParse(f *testing.F) {
	for _, file := range []string{"testdata/full.yaml", "testdata/bad/many-errors.yaml",
		"testdata/bad/syntax-error.yaml", "testdata/bad/duplicate-key.yaml"} {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, uint8(0), "", uint8(0), "")
	}
	f.Add([]byte(minimalYAML), uint8(1), "8", uint8(2), "1m")
	vars := config.EnvVars()
	f.Fuzz(func(t *testing.T, data []byte, v1 uint8, val1 string, v2 uint8, val2 string) {
		// wow.metadata reads a file or URL: keep the fuzzer off the
		// network and off devices such as /dev/zero.
		if bytes.Contains(bytes.ToLower(data), []byte("metadata")) || bytes.ContainsRune(data, '\\') {
			return
		}
		var env []string
		for _, v := range []struct {
			i   uint8
			val string
		}{{v1, val1}, {v2, val2}} {
			name := "WOW_NOT_A_KEY"
			if int(v.i) < len(vars) {
				name = vars[v.i]
			}
			if !strings.Contains(name, "METADATA") {
				env = append(env, name+"="+v.val)
			}
		}

		c, err := config.Parse(data, "fuzz.yaml", testRegistry(), env)
		if (c == nil) == (err == nil) {
			t.Fatalf("Parse returned %v and %v", c, err)
		}
		if err != nil {
			var errs *config.Errors
			if !errors.As(err, &errs) || len(errs.List) == 0 {
				t.Fatalf("error %v (%T) is not a non-empty *config.Errors", err, err)
			}
			for _, e := range errs.List {
				if e.Path == "" && e.Line == 0 {
					t.Errorf("problem %q names neither a key nor a line", e.Msg)
				}
			}
			if _, alone := config.Parse(data, "fuzz.yaml", testRegistry(), nil); alone == nil {
				for _, e := range errs.List {
					if e.Path == "" {
						t.Errorf("problem %q, caused by %q, names no key", e.Msg, env)
					}
				}
			}
			return
		}
		var printed bytes.Buffer
		if err := c.WriteYAML(&printed, testRegistry()); err != nil {
			t.Fatalf("printing a valid configuration: %v", err)
		}
		again, err := config.Parse(printed.Bytes(), "printed.yaml", testRegistry(), nil)
		if err != nil {
			t.Fatalf("the printed configuration does not parse: %v\n%s", err, printed.String())
		}
		if c.Kafka.SASL.Password != "" || hasSecret(c) {
			return // printed masked
		}
		for _, cc := range []*config.Config{c, again} {
			for name, d := range cc.Dispatchers {
				d.Handler.Raw = nil // as written: the printed one has the defaults
				cc.Dispatchers[name] = d
			}
		}
		if !reflect.DeepEqual(c, again) {
			t.Fatalf("the printed configuration parses to another one:\n%+v\n%+v\n%s", c, again, printed.String())
		}
	})
}

// hasSecret reports whether a handler of c sets a field WriteYAML masks.
func hasSecret(c *config.Config) bool {
	for _, d := range c.Dispatchers {
		if h, ok := d.Handler.Decoded.(*httpConfig); ok && h.Token != "" {
			return true
		}
	}
	return false
}

// TestSyntaxErrorLines holds what FuzzParse found: the yaml package reports
// some syntax errors without a line (those on the first line, bad bytes, an
// unknown anchor); Parse names the line.
func TestSyntaxErrorLines(t *testing.T) {
	for yaml, want := range map[string]string{
		`"`:                        "t.yaml:1: found unexpected end of stream",
		"\ta: 1":                   "t.yaml:1: found character that cannot start any token",
		"wow:\n  service: b\x01":   "t.yaml:2: control characters are not allowed",
		"wow:\n\n  service: \xff":  "t.yaml:3: invalid leading UTF-8 octet",
		"wow:\n  service: \u0080":  "t.yaml:2: control characters are not allowed",
		"wow:\n  a: &x 1\n  b: *y": "t.yaml:3: unknown anchor 'y' referenced",
	} {
		_, err := config.Parse([]byte(yaml), "t.yaml", testRegistry(), nil)
		if err == nil || err.Error() != want {
			t.Errorf("%q: %v, want %s", yaml, err, want)
		}
	}
}
