package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/handlerconfig"
)

type position struct{ line, col int }

// decoder turns YAML nodes and environment variables into a Config,
// collecting every problem with the position of the key it concerns.
type decoder struct {
	reg  *handler.Registry
	pos  map[string]position // key path (or list item) → where it is in the file
	env  map[string]string   // key path → the variable that set it
	set  map[string]string   // key path → the key of the --set pair that set it (its value may be a secret)
	made map[string]string   // key path → the key of the --set pair that added it to the document
	sets []setting           // the --set pairs, written into the document
	bad  map[string]bool     // key paths whose value could not be decoded
	errs []Error
}

func newDecoder(reg *handler.Registry) *decoder {
	return &decoder{
		reg:  reg,
		pos:  map[string]position{},
		env:  map[string]string{},
		set:  map[string]string{},
		made: map[string]string{},
		bad:  map[string]bool{},
	}
}

// errorf records a problem with the key at path, located at the key or, when
// it is not in the file, at its nearest ancestor that is. Problems with a
// value that could not be decoded are not reported twice.
func (d *decoder) errorf(path, format string, args ...any) {
	for p := path; p != ""; p = parent(p) {
		if d.bad[p] {
			return
		}
	}
	e := Error{Path: path, Msg: fmt.Sprintf(format, args...)}
	if v := d.source(path); v != "" {
		e.Msg += " (set by " + v + ")"
	} else if at, ok := d.positionOf(path); ok {
		e.Line, e.Col = at.line, at.col
	}
	d.errs = append(d.errs, e)
}

// outsidef is errorf for a problem found outside the configuration, in a
// file it names or in wow.metadata: see Error.Outside.
func (d *decoder) outsidef(path, format string, args ...any) {
	n := len(d.errs)
	d.errorf(path, format, args...)
	for i := n; i < len(d.errs); i++ {
		d.errs[i].Outside = true
	}
}

// positionOf returns where the key at path, or the nearest key above it, is
// written. The empty path is an empty key at the top of the file.
func (d *decoder) positionOf(path string) (position, bool) {
	if path == "" {
		at, ok := d.pos[""]
		return at, ok
	}
	for p := path; p != ""; p = parent(p) {
		if at, ok := d.pos[p]; ok {
			return at, true
		}
	}
	return position{}, false
}

// fail records a value that could not be decoded.
func (d *decoder) fail(path, format string, args ...any) {
	d.errorf(path, format, args...)
	d.bad[path] = true
}

// source names the environment variable or --set pair that set path or an
// ancestor of it; "" when the file did.
func (d *decoder) source(path string) string {
	for p := path; p != ""; p = parent(p) {
		if v, ok := d.set[p]; ok {
			return "--set " + v
		}
		if v, ok := d.made[p]; ok {
			return "--set " + v
		}
		if v, ok := d.env[p]; ok {
			return v
		}
	}
	return ""
}

// setCovers reports whether a --set pair set path, a part of it or an
// ancestor: the environment does not override it.
func (d *decoder) setCovers(path string) bool {
	for k := range d.set {
		if k == path || strings.HasPrefix(k, path+"[") || strings.HasPrefix(k, path+".") || strings.HasPrefix(path, k+".") {
			return true
		}
	}
	return false
}

// parent strips the last element of a key path: a list index or a key.
func parent(path string) string {
	if strings.HasSuffix(path, "]") {
		if i := strings.LastIndexByte(path, '['); i >= 0 {
			return path[:i]
		}
	}
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[:i]
	}
	return ""
}

// errors returns the problems sorted by position, those without one last.
func (d *decoder) errors(file string) *Errors {
	list := slices.Clone(d.errs)
	slices.SortStableFunc(list, func(a, b Error) int {
		if (a.Line == 0) != (b.Line == 0) {
			if a.Line == 0 {
				return 1
			}
			return -1
		}
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Col, b.Col))
	})
	return &Errors{File: file, List: list}
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// decodeDocument decodes data into c. It reports false when the document is
// not usable at all (a syntax error, no wow mapping).
func (d *decoder) decodeDocument(data []byte, c *Config) bool {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.errorf("wow", "required: the file is empty")
		} else {
			d.syntaxError(err, data)
		}
		return false
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		if err != nil {
			d.syntaxError(err, data)
		} else {
			d.errs = append(d.errs, Error{Line: next.Line, Col: next.Column, Msg: "more than one YAML document"})
		}
		return false
	}
	root := resolve(doc.Content[0])
	if isNull(root) {
		d.errorf("wow", "required: the file is empty")
		return false
	}
	if root.Kind != yaml.MappingNode {
		d.errs = append(d.errs, Error{Line: root.Line, Col: root.Column,
			Msg: "expected a mapping with the key wow, got " + describe(root)})
		return false
	}
	d.applySets(root, d.sets)
	var wow *yaml.Node
	d.eachKey("", root, func(key, path string, v *yaml.Node) {
		if key == "wow" {
			wow = v
			return
		}
		d.unknownKey(path, key, []string{"wow"}, []string{"wow"})
	})
	switch {
	case wow == nil:
		d.errorf("wow", "required: wowd reads its settings from the top-level key wow")
		return false
	case isNull(wow):
	case wow.Kind != yaml.MappingNode:
		d.fail("wow", "expected a mapping, got %s", describe(wow))
		return false
	default:
		decodeFields(d, "wow", "", wow, configFields, c, func(name, path string, v *yaml.Node) bool {
			switch name {
			case "contexts":
				d.contexts(path, v, c)
			case "dispatchers":
				d.dispatchers(path, v, c)
			default:
				return false
			}
			return true
		})
	}
	return true
}

func (d *decoder) syntaxError(err error, data []byte) {
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		d.errs = append(d.errs, Error{Line: line, Msg: m[2]})
		return
	}
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	d.errs = append(d.errs, Error{Line: syntaxLine(data, msg), Msg: msg})
}

// eachKey calls fn for each key of the mapping n at path, with the key's path
// and its value, after recording the key's position. It reports keys that
// are not strings, merge keys and duplicates.
func (d *decoder) eachKey(path string, n *yaml.Node, fn func(key, path string, v *yaml.Node)) {
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
			msg := "keys must be strings"
			if k.ShortTag() == "!!merge" {
				msg = "merge keys (<<) are not supported"
			}
			d.errs = append(d.errs, Error{Path: path, Line: k.Line, Col: k.Column, Msg: msg})
			continue
		}
		full := k.Value
		if path != "" {
			full = path + "." + k.Value
		}
		if first, dup := seen[k.Value]; dup {
			d.errs = append(d.errs, Error{Path: full, Line: k.Line, Col: k.Column,
				Msg: fmt.Sprintf("duplicate key (first at line %d)", first)})
			continue
		}
		seen[k.Value] = k.Line
		d.pos[full] = position{k.Line, k.Column}
		fn(k.Value, full, v)
	}
}

// decodeFields decodes the mapping n at path into dst with the fields
// table. rel is n's key relative to dst's mapping ("" for that mapping,
// "kafka" for wow.kafka). special decodes keys apart; it reports whether it
// took the key.
func decodeFields[T any](d *decoder, path, rel string, n *yaml.Node, fields []field[T], dst *T,
	special func(name, path string, v *yaml.Node) bool) {
	d.eachKey(path, n, func(key, full string, v *yaml.Node) {
		if strings.Contains(key, ".") {
			// One key is one element: kafka.tls.enabled under wow is
			// not the key nested, and taken as it it overrode that one.
			d.unknownKey(full, key, childNames(fields, rel), mappingNames(fields, rel))
			return
		}
		name := key
		if rel != "" {
			name = rel + "." + key
		}
		if special != nil && special(name, full, v) {
			return
		}
		for _, f := range fields {
			if f.name == name && f.ptr != nil {
				d.value(full, v, f.ptr(dst))
				return
			}
		}
		for _, f := range fields {
			if strings.HasPrefix(f.name, name+".") {
				switch {
				case isNull(v):
				case v.Kind != yaml.MappingNode:
					d.fail(full, "expected a mapping, got %s", describe(v))
				default:
					decodeFields(d, full, name, v, fields, dst, special)
				}
				return
			}
		}
		d.unknownKey(full, key, childNames(fields, rel), mappingNames(fields, rel))
	})
}

// childNames returns the keys the fields table allows in the mapping rel.
func childNames[T any](fields []field[T], rel string) []string {
	var names []string
	for _, f := range fields {
		rest := f.name
		if rel != "" {
			var ok bool
			if rest, ok = strings.CutPrefix(f.name, rel+"."); !ok {
				continue
			}
		}
		first, _, _ := strings.Cut(rest, ".")
		if !slices.Contains(names, first) {
			names = append(names, first)
		}
	}
	return names
}

// mappingNames returns the keys of the mapping rel that hold a mapping:
// nested keys, or a map by name (contexts, dispatchers).
func mappingNames[T any](fields []field[T], rel string) []string {
	var names []string
	for _, name := range childNames(fields, rel) {
		full := name
		if rel != "" {
			full = rel + "." + name
		}
		for _, f := range fields {
			if strings.HasPrefix(f.name, full+".") || f.name == full && strings.HasPrefix(f.typ, "map of ") {
				names = append(names, name)
				break
			}
		}
	}
	return names
}

// unknownKey reports key, one of a mapping whose keys are known,
// suggesting the known key closest to it; for a key written with dots
// whose first element is one of the known keys that hold a mapping
// (mappings), how to write it nested.
func (d *decoder) unknownKey(path, key string, known, mappings []string) {
	if key == "" {
		d.errorf(path, "a key without a name (an empty or null key)")
		return
	}
	if first, _, dotted := strings.Cut(key, "."); dotted && slices.Contains(mappings, first) {
		d.errorf(path, "unknown key (write it nested: %s)", nested(key))
		return
	}
	if k := closest(key, known); k != "" {
		d.errorf(path, "unknown key (did you mean %q?)", k)
		return
	}
	d.errorf(path, "unknown key")
}

// nested writes the dotted key as nested mappings, in YAML's flow style:
// a.b.c is a: {b: {c: ...}}.
func nested(key string) string {
	parts := strings.Split(key, ".")
	s := parts[len(parts)-1] + ": ..."
	for i := len(parts) - 2; i >= 0; i-- {
		s = parts[i] + ": {" + s + "}"
	}
	return s
}

// closest returns the known key that key resembles: the same but for case,
// dashes and underscores, else the nearest within a few typing mistakes
// (edit distance at most 2, or a third of the key's length); "" when none.
func closest(key string, known []string) string {
	norm := func(s string) string {
		return strings.ToLower(strings.NewReplacer("-", "", "_", "").Replace(s))
	}
	best, bestDist := "", max(2, len(key)/3)+1
	for _, k := range known {
		if norm(k) == norm(key) {
			return k
		}
		if dist := editDistance(key, k); dist < bestDist {
			best, bestDist = k, dist
		}
	}
	return best
}

// envTypo returns the variable of known that name, a WOW_* variable naming
// no key, is a typo of, or "" when it is none: within two typing mistakes
// (a slip such as WOW_DISPATCH_WORKRS), unless it has the shape of a
// Kubernetes service link (a Service named wow-ingest gives WOW_INGEST_PORT,
// WOW_INGEST_SERVICE_HOST, WOW_INGEST_PORT_9465_TCP_ADDR, ...) or is the
// Spring form of one of wowd's keys, dashes dropped (a Wow service's
// WOW_KAFKA_BOOTSTRAPSERVERS for wow.kafka.bootstrap-servers): those are
// other programs' and left alone. Looser matches (a third of the name, as
// unknown file keys get as a suggestion) would refuse a Wow service's own
// properties, such as WOW_MONGO_ENABLED next to WOW_INGEST_ENABLED.
func envTypo(name string, known []string) string {
	if serviceLink(name) {
		return ""
	}
	best, bestDist := "", 3
	for _, k := range known {
		if strings.ReplaceAll(k, "_", "") == strings.ReplaceAll(name, "_", "") && springForm(name, k) {
			return ""
		}
		if dist := editDistance(name, k); dist < bestDist {
			best, bestDist = k, dist
		}
	}
	return best
}

// springForm reports whether name is known with the underscores that stand
// for dashes of its key dropped, as Spring's relaxed binding writes a
// property (wow.kafka.bootstrap-servers: WOW_KAFKA_BOOTSTRAPSERVERS).
func springForm(name, known string) bool {
	key := envKey(known) // wow.kafka.bootstrap-servers
	spring := "WOW_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "").Replace(strings.TrimPrefix(key, "wow.")))
	return name == spring
}

// serviceLink reports whether name has the shape of a variable Kubernetes
// sets for a Service (its service links): <NAME>_SERVICE_HOST,
// <NAME>_SERVICE_PORT[_<port name>], <NAME>_PORT and
// <NAME>_PORT_<port>_<TCP|UDP|SCTP>[_PROTO|_PORT|_ADDR].
func serviceLink(name string) bool {
	if strings.HasSuffix(name, "_SERVICE_HOST") || strings.HasSuffix(name, "_PORT") ||
		strings.Contains(name, "_SERVICE_PORT") {
		return true
	}
	parts := strings.Split(name, "_")
	for i := 1; i+1 < len(parts); i++ {
		if parts[i] != "PORT" || parts[i+1] == "" {
			continue
		}
		if _, err := strconv.Atoi(parts[i+1]); err == nil && i+2 < len(parts) {
			switch parts[i+2] {
			case "TCP", "UDP", "SCTP":
				return true
			}
		}
	}
	return false
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// value decodes the scalar or list n into the field p points to.
func (d *decoder) value(path string, n *yaml.Node, p any) {
	if isNull(n) {
		return
	}
	if l, ok := p.(*[]string); ok {
		if n.Kind != yaml.SequenceNode {
			d.fail(path, "expected a list, got %s", describe(n))
			return
		}
		out := make([]string, 0, len(n.Content))
		for i, item := range n.Content {
			ip := fmt.Sprintf("%s[%d]", path, i)
			d.pos[ip] = position{item.Line, item.Column}
			item = resolve(item)
			if item.Kind != yaml.ScalarNode || isNull(item) {
				d.fail(ip, "expected a string, got %s", describe(item))
				continue
			}
			out = append(out, item.Value)
		}
		*l = out
		return
	}
	if n.Kind != yaml.ScalarNode {
		d.fail(path, "expected %s, got %s", expected(p), describe(n))
		return
	}
	if err := setText(p, n.Value); err != nil {
		d.fail(path, "%v", err)
	}
}

func (d *decoder) contexts(path string, n *yaml.Node, c *Config) {
	switch {
	case isNull(n):
		return
	case n.Kind != yaml.MappingNode:
		d.fail(path, "expected a mapping of bounded contexts by name, got %s", describe(n))
		return
	}
	d.eachKey(path, n, func(name, full string, v *yaml.Node) {
		var ctx Context
		switch {
		case isNull(v):
		case v.Kind != yaml.MappingNode:
			d.fail(full, "expected a mapping, got %s", describe(v))
		default:
			decodeFields(d, full, "", v, contextFields, &ctx, nil)
		}
		c.Contexts[name] = ctx
	})
}

func (d *decoder) dispatchers(path string, n *yaml.Node, c *Config) {
	switch {
	case isNull(n):
		return
	case n.Kind != yaml.MappingNode:
		d.fail(path, "expected a mapping of dispatchers by name, got %s", describe(n))
		return
	}
	d.eachKey(path, n, func(name, full string, v *yaml.Node) {
		disp := Dispatcher{Format: "wow", MaxParked: DefaultMaxParked, OnGap: "log", DeadLetter: DeadLetter{Enabled: true, Topic: DefaultDeadLetterTopic},
			Handler: Handler{Timeout: DefaultHandlerTimeout}}
		switch {
		case isNull(v):
		case v.Kind != yaml.MappingNode:
			d.fail(full, "expected a mapping, got %s", describe(v))
		default:
			decodeFields(d, full, "", v, dispatcherFields, &disp, func(name, path string, v *yaml.Node) bool {
				if name != "handler" {
					return false
				}
				d.handler(path, v, &disp.Handler)
				return true
			})
		}
		c.Dispatchers[name] = disp
	})
}

// handler decodes a handler mapping: its type, and the other keys as written
// for handler.Decode, recording their positions.
func (d *decoder) handler(path string, n *yaml.Node, h *Handler) {
	switch {
	case isNull(n):
		return
	case n.Kind != yaml.MappingNode:
		d.fail(path, "expected a mapping, got %s", describe(n))
		return
	}
	h.Raw = map[string]any{}
	kinds := d.handlerKinds(n)
	d.eachKey(path, n, func(key, full string, v *yaml.Node) {
		switch key {
		case "type":
			d.value(full, v, &h.Type)
			return
		case "timeout":
			d.value(full, v, &h.Timeout)
			return
		}
		d.positions(full, v)
		if x, ok := d.handlerValue(full, key, v, kinds); ok {
			h.Raw[key] = x
		}
	})
}

// handlerKinds returns how the keys of the handler mapping n are read, by
// dotted name (batch.linger), from the fields of the handler type n names;
// none when the type is unknown (reported elsewhere). A key it leaves out
// is read as YAML types it.
func (d *decoder) handlerKinds(n *yaml.Node) map[string]handlerKind {
	var typ string
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k, v := n.Content[i], resolve(n.Content[i+1]); k.Value == "type" && v.Kind == yaml.ScalarNode {
			typ = v.Value
		}
	}
	spec, ok := d.reg.Lookup(typ)
	if !ok {
		return nil
	}
	kinds := map[string]handlerKind{}
	for _, f := range handlerconfig.Fields(spec) {
		switch {
		case f.Type == "string":
			kinds[f.Name] = handlerKind{"string", f.Secret}
		case f.Type == "map of string":
			kinds[f.Name] = handlerKind{"map", f.Secret}
		case numberKinds[f.Type] != nil:
			kinds[f.Name] = handlerKind{f.Type, f.Secret}
		}
	}
	return kinds
}

// handlerKind is how a handler key is read: "string" (text), "map" (a map
// of text) or the type of a number (int, uint8, float64, ...).
type handlerKind struct {
	kind   string
	secret bool // never quoted in an error
}

// numberKinds parse the text of a handler's numbers as the fixed keys'
// are, in base 10: YAML reads 010 as octal 8 and 0x10 as 16. Their errors
// quote the text.
var numberKinds = map[string]func(s string) (any, error){
	"int":     func(s string) (any, error) { return parseIntAny(s, strconv.IntSize) },
	"int8":    func(s string) (any, error) { return parseIntAny(s, 8) },
	"int16":   func(s string) (any, error) { return parseIntAny(s, 16) },
	"int32":   func(s string) (any, error) { return parseIntAny(s, 32) },
	"int64":   func(s string) (any, error) { return parseIntAny(s, 64) },
	"uint":    func(s string) (any, error) { return parseUintAny(s, strconv.IntSize) },
	"uint8":   func(s string) (any, error) { return parseUintAny(s, 8) },
	"uint16":  func(s string) (any, error) { return parseUintAny(s, 16) },
	"uint32":  func(s string) (any, error) { return parseUintAny(s, 32) },
	"uint64":  func(s string) (any, error) { return parseUintAny(s, 64) },
	"float32": func(s string) (any, error) { return parseFloat(s, 32) },
	"float64": func(s string) (any, error) { return parseFloat(s, 64) },
}

// parseIntAny is parseInt, the fixed keys' reading of an integer, that
// also takes what handler integers took before they were read in base 10
// (YAML's types and the handler's strict decoding): digits grouped with
// underscores (1_000) and a decimal number of a whole value (5.0, 1e3).
func parseIntAny(s string, bits int) (any, error) {
	n, err := parseInt(s, bits)
	if err == nil {
		return n, nil
	}
	if f, ok := wholeDecimal(s); ok && f >= -math.Ldexp(1, bits-1) && f < math.Ldexp(1, bits-1) {
		return int64(f), nil
	}
	return nil, err
}

// parseUintAny is parseIntAny for an unsigned integer.
func parseUintAny(s string, bits int) (any, error) {
	n, err := strconv.ParseUint(s, 10, bits)
	switch {
	case err == nil:
		return n, nil
	case errors.Is(err, strconv.ErrRange):
		return nil, fmt.Errorf("%s is out of range", s)
	}
	if f, ok := wholeDecimal(s); ok && f >= 0 && f < math.Ldexp(1, bits) {
		return uint64(f), nil
	}
	return nil, fmt.Errorf("%q is not an integer >= 0", s)
}

// wholeDecimal reads s, a decimal number (its digits maybe grouped with
// underscores between them), when its value is whole: 1_000, 5.0, 1e3;
// not 0x10, 010 read as octal, or 1.5.
func wholeDecimal(s string) (float64, bool) {
	if grouped.MatchString(s) {
		s = strings.ReplaceAll(s, "_", "")
	}
	if !decimal.MatchString(s) {
		return 0, false
	}
	var r big.Rat // exact: 1.0000000000000001 is no integer, whatever float64 rounds it to
	if _, ok := r.SetString(s); !ok || !r.IsInt() {
		return 0, false
	}
	f, _ := r.Float64()
	return f, math.Abs(f) < 1<<53
}

// grouped is an integer whose digits are grouped with underscores.
var grouped = regexp.MustCompile(`^[-+]?[0-9]+(_[0-9]+)+$`)

// decimal is a number in base 10: digits, a fraction, an exponent.
var decimal = regexp.MustCompile(`^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$`)

// parseFloat reads a decimal number: YAML's 0x10, .inf and .nan are not.
func parseFloat(s string, bits int) (any, error) {
	if !decimal.MatchString(s) {
		return nil, fmt.Errorf("%q is not a number", s)
	}
	f, err := strconv.ParseFloat(s, bits)
	if err != nil {
		return nil, fmt.Errorf("%s is out of range", s)
	}
	return f, nil
}

// handlerValue decodes the value v of handler key name (a dotted name) at
// path as YAML types it, except that a scalar keeps the text it was
// written with when it goes to a text key (kinds): YAML reads an API key
// 0012345 as the number 12345 and a header value true as a boolean, which
// the handler's strict decoding would refuse, and --set has no quotes to
// write them as strings; and a number's text is read in base 10. A key
// written twice in a mapping is reported, as it is everywhere in the file,
// and the first one kept. It reports false when v cannot be decoded, which
// it has reported; a mapping leaves out the values that cannot be.
func (d *decoder) handlerValue(path, name string, v *yaml.Node, kinds map[string]handlerKind) (any, bool) {
	v = resolve(v)
	merges, plain := false, true // YAML merge keys (<<) and keys that are not text are left to YAML's decoding
	for i := 0; v.Kind == yaml.MappingNode && i < len(v.Content); i += 2 {
		merges = merges || v.Content[i].ShortTag() == "!!merge"
		plain = plain && v.Content[i].Kind == yaml.ScalarNode
	}
	kind, secret := kinds[name].kind, kinds[name].secret
	switch {
	case merges || !plain:
	case v.Kind == yaml.ScalarNode && isNull(v):
	case v.Kind == yaml.ScalarNode && kind == "string":
		return v.Value, true
	case v.Kind == yaml.ScalarNode && numberKinds[kind] != nil:
		x, err := numberKinds[kind](v.Value)
		switch {
		case err != nil && secret:
			d.fail(path, "expected %s, got a value of another type", kind) // a secret's value is never shown
			return nil, false
		case err != nil:
			d.fail(path, "%v", err)
			return nil, false
		}
		return x, true
	case v.Kind == yaml.MappingNode:
		m := map[string]any{}
		seen := map[string]int{}
		for i := 0; i+1 < len(v.Content); i += 2 {
			k, e := v.Content[i], v.Content[i+1]
			p := path + "." + k.Value
			if first, dup := seen[k.Value]; dup {
				d.errs = append(d.errs, Error{Path: p, Line: k.Line, Col: k.Column,
					Msg: fmt.Sprintf("duplicate key (first at line %d)", first)})
				continue
			}
			seen[k.Value] = k.Line
			var x any
			var ok bool
			if kind == "map" { // its entries are text, not keys of the handler
				x, ok = d.handlerValue(p, "", e, map[string]handlerKind{"": {"string", secret}})
			} else {
				x, ok = d.handlerValue(p, name+"."+k.Value, e, kinds)
			}
			if ok {
				m[k.Value] = x
			}
		}
		return m, true
	}
	var x any
	if err := v.Decode(&x); err != nil {
		d.fail(path, "%v", err)
		return nil, false
	}
	return x, true
}

// positions records where the keys and items inside n are.
func (d *decoder) positions(path string, n *yaml.Node) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			p := path + "." + k.Value
			if _, seen := d.pos[p]; !seen {
				d.pos[p] = position{k.Line, k.Column}
			}
			d.positions(p, resolve(n.Content[i+1]))
		}
	case yaml.SequenceNode:
		for i, item := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			d.pos[p] = position{item.Line, item.Column}
			d.positions(p, resolve(item))
		}
	}
}

// applyEnv applies the WOW_* variables of env (KEY=value strings) to the
// fixed keys. Empty values are ignored, as viper does: an empty variable
// does not clear a key (a variable defined from an unset one is empty).
// A WOW_* variable that names no key but is close to one is reported: a
// typo that would otherwise do nothing. Others are left alone: the
// environment of a pod holds variables wowd does not own under the same
// prefix (Kubernetes' service links for a Service named wow-..., a Wow
// service's Spring properties), and refusing them would stop a deployment
// that does nothing wrong. (wowd's own variables, WOWD_*, are not keys.)
func (d *decoder) applyEnv(c *Config, env []string) {
	vars := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "WOW_") {
			vars[k] = v
		}
	}
	known := EnvVars()
	for _, name := range slices.Sorted(maps.Keys(vars)) {
		if _, found := slices.BinarySearch(known, name); found {
			continue
		}
		if k := envTypo(name, known); k != "" {
			d.errs = append(d.errs, Error{Path: envKey(k), Msg: "set by " + k + ", not " + name + " (a variable that names no key)"})
		}
	}
	for _, f := range configFields {
		if f.ptr == nil {
			continue
		}
		name, path := envName(f.name), "wow."+f.name
		v := vars[name]
		if v == "" || d.setCovers(path) {
			continue
		}
		if !utf8.ValidString(v) {
			// A file's bytes are checked by the YAML reader; a variable's
			// are not, and `wowd config print` could not write them.
			d.errs = append(d.errs, Error{Path: path, Msg: name + ": not valid UTF-8"})
			d.bad[path] = true
			continue
		}
		if err := setText(f.ptr(c), v); err != nil {
			d.errs = append(d.errs, Error{Path: path, Msg: fmt.Sprintf("%s: %v", name, err)})
			d.bad[path] = true
			continue
		}
		d.env[path] = name
	}
}

// complete fills the defaults computed from other keys: context aliases and
// the contexts of dispatchers that name none.
func (d *decoder) complete(c *Config) {
	names := make([]string, 0, len(c.Contexts))
	for name, ctx := range c.Contexts {
		names = append(names, name)
		if ctx.Alias == "" {
			ctx.Alias = name
			c.Contexts[name] = ctx
		}
	}
	slices.Sort(names)
	for name, disp := range c.Dispatchers {
		if disp.Contexts == nil && len(names) > 0 {
			disp.Contexts = slices.Clone(names)
			c.Dispatchers[name] = disp
		}
	}
}

func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		return resolve(n.Content[0])
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe names a node's value for messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.ShortTag() {
	case "!!null":
		return "nothing"
	case "!!str":
		return strconv.Quote(n.Value)
	}
	return n.Value
}

// expected names what a field takes, for messages.
func expected(p any) string {
	switch p.(type) {
	case *int, *int32:
		return "an integer"
	case *bool:
		return "true or false"
	case *time.Duration:
		return "a duration"
	case *[]string:
		return "a list"
	}
	return "a string"
}
