// Package handlerconfig reads a handler's configuration from its
// handler.Spec: the fields its configuration struct declares in `config`
// tags (for validation, `wowd handlers`, secret masking and the generated
// reference), and the strict decoding of a dispatcher's handler mapping
// into a new value of that struct. Plugin authors only write the tags; this
// is wowd's side of them.
package handlerconfig

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"

	"github.com/wowd/wowd/handler"
)

// Field describes one configuration field of a handler, read from the struct
// tags of the value its Spec.Config returns:
//
//	URL     string        `config:"url" required:"true" desc:"Where to POST messages."`
//	Timeout time.Duration `config:"timeout" desc:"Per-request timeout."`
//	Token   string        `config:"token" secret:"true" desc:"Bearer token."`
//
// The same tags drive strict decoding, `wowd config validate`, secret masking
// in `wowd config print` and the generated handler reference.
type Field struct {
	Name        string
	Type        string
	Default     string
	Description string
	Required    bool
	Secret      bool
	// Reload marks a key (tag reload:"true") a running handler takes
	// without a restart when the configuration file changes: the handler
	// implements the daemon's reconfiguration interface.
	Reload bool
}

// Fields returns the configuration fields of spec, in declaration order.
func Fields(spec handler.Spec) []Field {
	if spec.Config == nil {
		return nil
	}
	v := reflect.ValueOf(spec.Config())
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return nil
	}
	return fieldsOf(v, "")
}

func fieldsOf(v reflect.Value, prefix string) []Field {
	t := v.Type()
	var out []Field
	for i := range t.NumField() {
		sf := t.Field(i)
		name, ok := sf.Tag.Lookup("config")
		if !ok || name == "-" {
			continue
		}
		name = strings.Split(name, ",")[0]
		fv := v.Field(i)
		if sf.Type.Kind() == reflect.Struct && sf.Type != reflect.TypeFor[time.Duration]() {
			out = append(out, fieldsOf(fv, prefix+name+".")...)
			continue
		}
		out = append(out, Field{
			Name:        prefix + name,
			Type:        typeName(sf.Type),
			Default:     defaultString(fv),
			Description: sf.Tag.Get("desc"),
			Required:    sf.Tag.Get("required") == "true",
			Secret:      sf.Tag.Get("secret") == "true",
			Reload:      sf.Tag.Get("reload") == "true",
		})
	}
	return out
}

func typeName(t reflect.Type) string {
	switch {
	case t == reflect.TypeFor[time.Duration]():
		return "duration"
	case t.Kind() == reflect.Slice:
		return "list of " + typeName(t.Elem())
	case t.Kind() == reflect.Map:
		return "map of " + typeName(t.Elem())
	}
	return t.Kind().String()
}

func defaultString(v reflect.Value) string {
	if v.IsZero() {
		return ""
	}
	if d, ok := v.Interface().(time.Duration); ok {
		return d.String()
	}
	return fmt.Sprint(v.Interface())
}

// strictNumbers refuses what mapstructure would take in silence: a number
// for a duration (it made 10 into 10ns; durations are written 10s, as in
// the fixed keys) and a fraction for an integer (it cut 0.9 down to 0,
// which can mean "no limit").
func strictNumbers(from, to reflect.Type, data any) (any, error) {
	isNumber := func(k reflect.Kind) bool { return k >= reflect.Int && k <= reflect.Float64 }
	switch {
	case to == reflect.TypeOf(time.Duration(0)) && isNumber(from.Kind()):
		return nil, fmt.Errorf("%v is not a duration: give its unit (%vs, %vms)", data, data, data)
	case to.Kind() >= reflect.Int && to.Kind() <= reflect.Uint64 && (from.Kind() == reflect.Float32 || from.Kind() == reflect.Float64):
		if f := reflect.ValueOf(data).Float(); f != math.Trunc(f) {
			return nil, fmt.Errorf("%v is not an integer", data)
		}
	}
	return data, nil
}

// Decode fills a new configuration value of spec from raw (the handler's YAML
// mapping without its `type` key). Unknown keys, wrong types, missing
// required fields and Validate failures are all reported, each naming its
// key: the error is an errors.Join of one error per problem.
func Decode(spec handler.Spec, raw map[string]any) (any, error) {
	if spec.Config == nil {
		if len(raw) > 0 {
			var errs []error
			for k := range raw {
				errs = append(errs, fmt.Errorf("%s: unknown key (handler %q takes no configuration)", k, spec.Name))
			}
			return nil, errors.Join(errs...)
		}
		return nil, nil
	}
	cfg := spec.Config()
	var md mapstructure.Metadata
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		TagName:     "config",
		ErrorUnused: true,
		// Keys are written as declared, as the fixed keys are: the
		// decoder's default ignores case, which took Max-Attempts for
		// max-attempts and hid a TLS: {CA-File: …} from the checks that
		// go by a key's name.
		MatchName:  func(key, field string) bool { return key == field },
		Metadata:   &md,
		DecodeHook: mapstructure.ComposeDecodeHookFunc(strictNumbers, mapstructure.StringToTimeDurationHookFunc()),
		Result:     cfg,
	})
	if err != nil {
		return nil, fmt.Errorf("handler %q: building decoder: %w", spec.Name, err)
	}
	var errs []error
	if err := dec.Decode(raw); err != nil {
		// Since mapstructure v2.5.0 the keys unknown at the top are
		// reported under the configuration's type name instead of "".
		root := reflect.TypeOf(cfg).Elem().String()
		for _, e := range leaves(err) {
			errs = append(errs, unknownKeys(e, root)...)
		}
	}
	set := make(map[string]bool, len(md.Keys))
	for _, k := range md.Keys {
		set[k] = true
	}
	for _, f := range Fields(spec) {
		if f.Required && !set[f.Name] {
			errs = append(errs, fmt.Errorf("%s: required", f.Name))
		}
	}
	// Validate runs whatever else was found, so that every problem shows
	// in one round; what it says of a key reported already (a value that
	// did not decode, a required key missing) is left out, and so is what
	// it says of another key in terms of one: that one holds its default,
	// not what the file says (backoff-max compared with a backoff-initial
	// that did not decode).
	if v, ok := cfg.(handler.Validator); ok {
		if err := v.Validate(); err != nil {
			reported := map[string]bool{}
			for _, e := range errs {
				reported[problemKey(e)] = true
			}
			for _, e := range leaves(err) {
				if k := problemKey(e); (k == "" || !reported[k]) && !mentionsAny(e.Error(), reported) {
					errs = append(errs, e)
				}
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return cfg, nil
}

// mentionsAny reports whether msg names one of keys as a whole word.
func mentionsAny(msg string, keys map[string]bool) bool {
	word := func(b byte) bool {
		return b == '-' || b == '_' || b == '.' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
	}
	for k := range keys {
		if k == "" {
			continue
		}
		for i := 0; ; {
			j := strings.Index(msg[i:], k)
			if j < 0 {
				break
			}
			j += i
			end := j + len(k)
			if (j == 0 || !word(msg[j-1])) && (end == len(msg) || !word(msg[end])) {
				return true
			}
			i = j + 1
		}
	}
	return false
}

// problemKey returns the key a problem of Decode is about ("" when it
// names none): an unknown key, the field of a value that did not decode, or
// the "key: " its message starts with.
func problemKey(err error) string {
	var uk *UnknownKeyError
	if errors.As(err, &uk) {
		return uk.Key
	}
	var de *mapstructure.DecodeError
	if errors.As(err, &de) {
		return de.Name()
	}
	if k, _, ok := strings.Cut(err.Error(), ": "); ok && !strings.Contains(k, " ") {
		return k
	}
	return ""
}

// UnknownKeyError reports a configuration key the handler does not take.
type UnknownKeyError struct {
	Key  string // dotted path within the handler's configuration
	Name string // the key as written, the last element of Key (it may hold dots itself)
}

func (e *UnknownKeyError) Error() string { return e.Key + ": unknown key" }

// unknownKeys turns the decoder's "has invalid keys: a, b" into one
// UnknownKeyError per key; other errors pass unchanged. root is the name
// the decoder gives the top of the configuration.
func unknownKeys(err error, root string) []error {
	var de *mapstructure.DecodeError
	if !errors.As(err, &de) {
		return []error{err}
	}
	list, ok := strings.CutPrefix(de.Unwrap().Error(), "has invalid keys: ")
	if !ok {
		return []error{err}
	}
	var errs []error
	for _, k := range strings.Split(list, ", ") {
		path := k
		if name := de.Name(); name != "" && name != root {
			path = name + "." + k
		}
		errs = append(errs, &UnknownKeyError{Key: path, Name: k})
	}
	return errs
}

// leaves returns the leaves of a tree of joined errors, looking through the
// wrapping the decoder puts around its list.
func leaves(err error) []error {
	if multi, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range multi.Unwrap() {
			out = append(out, leaves(e)...)
		}
		return out
	}
	if _, leaf := err.(*mapstructure.DecodeError); !leaf {
		if inner, ok := errors.Unwrap(err).(interface{ Unwrap() []error }); ok {
			return leaves(inner.(error))
		}
	}
	return []error{err}
}
