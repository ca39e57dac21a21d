package handlerconfig_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/handlerconfig"
)

type testConfig struct {
	URL     string        `config:"url" required:"true" desc:"Where to send."`
	Timeout time.Duration `config:"timeout" desc:"Per call."`
	Token   string        `config:"token" secret:"true"`
	Max     int           `config:"max-attempts"`
}

func testSpec() handler.Spec {
	return handler.Spec{
		Name:   "t",
		Config: func() any { return &testConfig{Timeout: 5 * time.Second, Max: 3} },
		New:    func(any, handler.Deps) (handler.Handler, error) { return nil, nil },
	}
}

func TestDecodeFillsDefaultsAndValues(t *testing.T) {
	cfg, err := handlerconfig.Decode(testSpec(), map[string]any{"url": "http://x", "timeout": "2s"})
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.(*testConfig)
	if c.URL != "http://x" || c.Timeout != 2*time.Second || c.Max != 3 {
		t.Fatalf("decoded %+v", c)
	}
}

func TestDecodeReportsEveryProblem(t *testing.T) {
	_, err := handlerconfig.Decode(testSpec(), map[string]any{"urll": "x", "max-attempts": "many"})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"urll", "max-attempts", "url: required"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestFields(t *testing.T) {
	fs := handlerconfig.Fields(testSpec())
	if len(fs) != 4 || fs[0].Name != "url" || !fs[0].Required || fs[1].Default != "5s" || !fs[2].Secret || fs[1].Type != "duration" {
		t.Fatalf("fields %+v", fs)
	}
}

func TestDecodeNamesUnknownKeys(t *testing.T) {
	_, err := handlerconfig.Decode(testSpec(), map[string]any{"url": "http://x", "uper": 1, "timout": "1s"})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"uper: unknown key", "timout: unknown key"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "invalid keys") {
		t.Errorf("raw decoder text leaks: %q", err)
	}
}

// validatedConfig checks its values with Validate.
type validatedConfig struct {
	URL string        `config:"url" required:"true"`
	Min time.Duration `config:"min"`
	Max time.Duration `config:"max"`
}

func (c *validatedConfig) Validate() error {
	var errs []error
	if c.Min > c.Max {
		errs = append(errs, errors.New("min: must be at most max"))
	}
	if c.URL == "" {
		errs = append(errs, errors.New("url: must not be empty"))
	}
	return errors.Join(errs...)
}

// TestDecodeValidatesDespiteOtherProblems: the handler's Validate runs even
// when keys are unknown, wrongly typed or missing, so every problem shows
// in one round; what it says of a key already reported is left out.
func TestDecodeValidatesDespiteOtherProblems(t *testing.T) {
	spec := handler.Spec{
		Name:   "v",
		Config: func() any { return &validatedConfig{} },
		New:    func(any, handler.Deps) (handler.Handler, error) { return nil, nil },
	}
	_, err := handlerconfig.Decode(spec, map[string]any{"url": "http://x", "mni": "1s", "min": "2s", "max": "1s"})
	if err == nil || !strings.Contains(err.Error(), "mni: unknown key") || !strings.Contains(err.Error(), "min: must be at most max") {
		t.Errorf("unknown key and a Validate problem: %v, want both", err)
	}
	_, err = handlerconfig.Decode(spec, map[string]any{"min": "2s", "max": "1s"})
	if err == nil || !strings.Contains(err.Error(), "url: required") || !strings.Contains(err.Error(), "min: must be at most max") ||
		strings.Contains(err.Error(), "url: must not be empty") {
		t.Errorf("a missing key and a Validate problem: %v, want url: required and min, once each", err)
	} // max did not decode and holds its default (0): that min exceeds it
	// says nothing of the file.
	_, err = handlerconfig.Decode(spec, map[string]any{"url": "http://x", "min": "2s", "max": "soon"})
	if err == nil || !strings.Contains(err.Error(), "max") || strings.Contains(err.Error(), "min: must be at most max") {
		t.Errorf("a value that did not decode: %v, want it alone, not a comparison with its default", err)
	}
}

// A number for a duration and a fraction for an integer are refused, each
// naming its key, as the fixed keys refuse them: mapstructure took 10 as
// 10ns (a request-timeout of 10 timed every request out) and cut 0.9 down
// to 0 (a max-attempts of 0 retries forever). Whole numbers written as
// floats (YAML's 3.0) and durations with units still decode. Found by
// review.
func TestDecodeRefusesNumbersItWouldBend(t *testing.T) {
	for _, raw := range []map[string]any{
		{"url": "http://x", "timeout": 10},
		{"url": "http://x", "timeout": 1.5},
		{"url": "http://x", "max-attempts": 0.9},
	} {
		_, err := handlerconfig.Decode(testSpec(), raw)
		if err == nil {
			t.Errorf("%v: accepted", raw)
			continue
		}
		for k := range raw {
			if k != "url" && !strings.Contains(err.Error(), k) {
				t.Errorf("%v: error %q does not name %s", raw, err, k)
			}
		}
	}
	cfg, err := handlerconfig.Decode(testSpec(), map[string]any{"url": "http://x", "timeout": "10s", "max-attempts": 4.0})
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.(*testConfig); c.Timeout != 10*time.Second || c.Max != 4 {
		t.Fatalf("decoded %+v", c)
	}
}
