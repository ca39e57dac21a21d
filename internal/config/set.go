package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// setting is one key=value of a --set argument.
type setting struct {
	key   string    // the key as written, for messages: never the value, which may be a secret
	path  []segment // the key, split at its unescaped dots
	value *yaml.Node
}

// segment is one element of a --set key: a mapping key, then list indexes
// (`servers[1]` is key "servers", index 1).
type segment struct {
	key     string
	indexes []int
}

// parseSets splits --set arguments the way Helm does in the simple cases:
// an argument holds key=value pairs separated by commas; a key is a dotted
// path whose elements may end with [index]; a value in braces is a list
// ({a,b}); a backslash escapes a comma, a dot in a key, or a brace. Values
// are YAML scalars, typed by the key they set; null removes the key from
// the file, leaving its default. Each problem names its argument.
func parseSets(args []string) ([]setting, []Error) {
	var out []setting
	var errs []Error
	for a, arg := range args {
		pairs := splitUnescaped(arg, ',', true)
		for i, pair := range pairs {
			s, err := parseSet(pair)
			if err == nil {
				out = append(out, s)
				continue
			}
			// Named by its key: the value may be a secret.
			if key, ok := shownKey(pairs, i); ok {
				errs = append(errs, Error{Path: "--set " + key, Msg: err.Error()})
				continue
			}
			msg := "want key=value" // parseSet's messages may quote the key
			if key, _, ok := cutUnescaped(pair, '='); ok && key != "" {
				msg = "keys start with wow."
			}
			where, hint := unnamedPair(a, i, pairs)
			errs = append(errs, Error{Path: "--set", Msg: where + ": " + msg + hint})
		}
	}
	return out, errs
}

// shownKey returns the key of the pair i of an argument split into pairs,
// if it may be shown. What follows a comma may be the rest of a value
// split there, a secret's (--set wow.kafka.sasl.password=a,b, or a,b== in
// base64): unless it is a key of wowd's, it is never shown.
func shownKey(pairs []string, i int) (string, bool) {
	key, _, ok := cutUnescaped(pairs[i], '=')
	return key, ok && key != "" && (i == 0 || strings.HasPrefix(key, "wow."))
}

// unnamedPair names the pair i of the --set argument a, split into pairs,
// by its position and the key of the pair before it, for a pair that has
// no key to name it by; the hint says how to keep a comma in a value.
func unnamedPair(a, i int, pairs []string) (where, hint string) {
	where = fmt.Sprintf("argument %d", a+1)
	if len(pairs) == 1 {
		return where, ""
	}
	where += fmt.Sprintf(", pair %d", i+1)
	if i == 0 {
		return where, ""
	}
	if key, ok := shownKey(pairs, i-1); ok {
		where += " (after " + key + ")"
	}
	return where, `; a comma that is part of a value is written \,`
}

func parseSet(pair string) (setting, error) {
	key, value, ok := cutUnescaped(pair, '=')
	if !ok || key == "" {
		return setting{}, fmt.Errorf("want key=value")
	}
	s := setting{key: key}
	for _, el := range splitUnescaped(key, '.', false) {
		seg, err := parseSegment(el)
		if err != nil {
			return setting{}, err
		}
		s.path = append(s.path, seg)
	}
	if s.path[0].key != "wow" {
		return setting{}, fmt.Errorf("keys start with wow. (wow.%s)", key)
	}
	if rest, ok := strings.CutPrefix(value, "{"); ok {
		inner, ok := strings.CutSuffix(rest, "}")
		if !ok {
			return setting{}, fmt.Errorf("a list is written {a,b}: missing }")
		}
		s.value = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		if inner != "" {
			for _, item := range splitUnescaped(inner, ',', false) {
				s.value.Content = append(s.value.Content, scalar(unescape(item)))
			}
		}
		return s, nil
	}
	s.value = scalar(unescape(value))
	return s, nil
}

// parseSegment parses a key element with optional [index] suffixes.
func parseSegment(el string) (segment, error) {
	key, rest, _ := strings.Cut(el, "[")
	seg := segment{key: unescape(key)}
	if seg.key == "" {
		return segment{}, fmt.Errorf("empty key element in %q", el)
	}
	if rest == "" {
		return seg, nil
	}
	for _, part := range strings.Split("["+rest, "[")[1:] {
		n, err := strconv.Atoi(strings.TrimSuffix(part, "]"))
		if !strings.HasSuffix(part, "]") || err != nil || n < 0 || n > 1024 {
			return segment{}, fmt.Errorf("%q: a list index is [0] to [1024]", el)
		}
		seg.indexes = append(seg.indexes, n)
	}
	return seg, nil
}

// scalar is a plain YAML scalar, typed as YAML would type it: "30s" a
// string, "8" an integer, "true" a boolean, "null" nothing. An empty value
// is the empty string.
func scalar(v string) *yaml.Node {
	if v == "" {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str"}
	}
	n := &yaml.Node{Kind: yaml.ScalarNode, Value: v}
	n.Tag = n.ShortTag() // the tag YAML's resolution gives the plain value
	return n
}

// splitUnescaped splits s at each sep not preceded by a backslash, keeping
// escapes for the later steps. With braces, a sep inside {...} does not
// split (a list value: a={x,y},b=1).
func splitUnescaped(s string, sep byte, braces bool) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			i++
		case braces && c == '{':
			depth++
		case braces && c == '}' && depth > 0:
			depth--
		case c == sep && depth == 0:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// cutUnescaped cuts s at its first sep not preceded by a backslash.
func cutUnescaped(s string, sep byte) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case sep:
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// unescape removes the backslashes escaping the next character.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// applySets writes the settings into the document's root mapping, as if the
// file held them: the strict decoding then checks them like any key. Keys
// and values written here have no position; d.set remembers which argument
// set each path, for messages and for `wowd config print`.
func (d *decoder) applySets(root *yaml.Node, sets []setting) {
	for _, s := range sets {
		n := root
		var path strings.Builder
		for i, seg := range s.path {
			final := i == len(s.path)-1
			if i > 0 {
				path.WriteByte('.')
			}
			path.WriteString(seg.key)
			want := yaml.MappingNode
			if len(seg.indexes) > 0 {
				want = yaml.SequenceNode
			}
			if !hasKey(n, seg.key) {
				d.made[path.String()] = s.key // problems inside it come from s
			}
			n = setChild(n, seg.key, final && len(seg.indexes) == 0, want, s.value)
			for j, idx := range seg.indexes {
				fmt.Fprintf(&path, "[%d]", idx)
				lastIndex := j == len(seg.indexes)-1
				want := yaml.MappingNode
				if !lastIndex {
					want = yaml.SequenceNode
				}
				n = setItem(n, idx, final && lastIndex, want, s.value)
			}
		}
		d.set[path.String()] = s.key
	}
}

// hasKey reports whether the mapping m has key.
func hasKey(m *yaml.Node, key string) bool {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := m.Content[i]; k.Kind == yaml.ScalarNode && k.Value == key {
			return true
		}
	}
	return false
}

// setChild returns the node under key in the mapping m, adding the key
// when missing: v when last, else a container of kind (an existing value of
// another kind is replaced, as Helm does).
func setChild(m *yaml.Node, key string, last bool, kind yaml.Kind, v *yaml.Node) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := m.Content[i]; k.Kind == yaml.ScalarNode && k.Value == key {
			if last && isNull(v) { // null removes the key, as in Helm
				m.Content = slices.Delete(m.Content, i, i+2)
				return v
			}
			return replace(&m.Content[i+1], last, kind, v)
		}
	}
	if last && isNull(v) {
		return v
	}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, nil)
	return replace(&m.Content[len(m.Content)-1], last, kind, v)
}

// setItem is setChild for the item idx of the list l, which it grows with
// nulls as needed.
func setItem(l *yaml.Node, idx int, last bool, kind yaml.Kind, v *yaml.Node) *yaml.Node {
	for len(l.Content) <= idx {
		l.Content = append(l.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"})
	}
	return replace(&l.Content[idx], last, kind, v)
}

// replace puts v at *slot when last; otherwise makes sure *slot holds a
// container of kind and returns it.
func replace(slot **yaml.Node, last bool, kind yaml.Kind, v *yaml.Node) *yaml.Node {
	if last {
		*slot = v
		return v
	}
	cur := *slot
	if cur != nil && cur.Kind == yaml.AliasNode {
		// Set in a copy: the anchored value stays as written elsewhere.
		cur = deepCopy(resolve(cur))
		*slot = cur
	}
	if cur == nil || cur.Kind != kind {
		cur = &yaml.Node{Kind: kind, Tag: "!!map"}
		if kind == yaml.SequenceNode {
			cur.Tag = "!!seq"
		}
		*slot = cur
	}
	return cur
}

// deepCopy copies n and everything under it, aliases resolved.
func deepCopy(n *yaml.Node) *yaml.Node {
	c := *n
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, child := range n.Content {
		c.Content[i] = deepCopy(resolve(child))
	}
	return &c
}
