package config

import (
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/handlerconfig"
	"github.com/wowd/wowd/internal/redact"
)

// mask replaces the value of every secret that is set.
const mask = redact.Mask

// WriteYAML writes the effective configuration as YAML under `wow`, in the
// order of the file's reference, with map entries sorted by name. Secrets
// that are set are masked: kafka.sasl.password and the handler fields
// marked Secret in reg (nil means handler.Default()). Handlers are written
// from their decoded configuration, defaults included.
func (c *Config) WriteYAML(w io.Writer, reg *handler.Registry) error {
	root, err := c.tree(reg, true)
	if err != nil {
		return err
	}
	return encode(w, root)
}

// tree returns the effective configuration as a YAML document, its secrets
// masked when mask is set.
func (c *Config) tree(reg *handler.Registry, mask bool) (*yaml.Node, error) {
	if reg == nil {
		reg = handler.Default()
	}
	wow, err := encodeFields(configFields, c, mask, func(name string) (*yaml.Node, error) {
		if name == "contexts" {
			return c.contextsNode()
		}
		return c.dispatchersNode(reg, mask)
	})
	if err != nil {
		return nil, err
	}
	root := mappingNode()
	addPair(root, "wow", wow)
	if mask {
		redactURLs(root)
	}
	return root, nil
}

// redactURLs masks the credentials of every URL in the tree (a handler's
// url, wow.metadata): its password and the values of its query
// (redact.URL).
func redactURLs(n *yaml.Node) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		n.Value = redact.URL(n.Value)
	}
	for _, c := range n.Content {
		redactURLs(c)
	}
}

func encode(w io.Writer, root *yaml.Node) error {
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return fmt.Errorf("writing config: %w", err)
	}
	return enc.Close()
}

func (c *Config) contextsNode() (*yaml.Node, error) {
	m := mappingNode()
	for _, name := range slices.Sorted(maps.Keys(c.Contexts)) {
		ctx := c.Contexts[name]
		n, err := encodeFields(contextFields, &ctx, true, nil)
		if err != nil {
			return nil, err
		}
		addPair(m, name, n)
	}
	return m, nil
}

func (c *Config) dispatchersNode(reg *handler.Registry, mask bool) (*yaml.Node, error) {
	m := mappingNode()
	for _, name := range slices.Sorted(maps.Keys(c.Dispatchers)) {
		disp := c.Dispatchers[name]
		// The effective policy, where the file leaves it to the format and
		// dead-letter.enabled: whether a failing aggregate parks is what an
		// operator reads the print for.
		disp.OnFailure = disp.FailurePolicy()
		n, err := encodeFields(dispatcherFields, &disp, mask, nil)
		if err != nil {
			return nil, err
		}
		if err := handlerFields(child(n, "handler"), disp.Handler, reg, mask); err != nil {
			return nil, fmt.Errorf("dispatcher %q: %w", name, err)
		}
		addPair(m, name, n)
	}
	return m, nil
}

// encodeFields encodes v as a mapping following its fields table; special
// encodes the entries without ptr.
func encodeFields[T any](fields []field[T], v *T, mask bool, special func(name string) (*yaml.Node, error)) (*yaml.Node, error) {
	root := mappingNode()
	for _, f := range fields {
		var val *yaml.Node
		if f.ptr == nil {
			var err error
			if val, err = special(f.name); err != nil {
				return nil, err
			}
		} else {
			p := f.ptr(v)
			if f.omitEmpty && reflect.ValueOf(p).Elem().IsZero() {
				continue
			}
			val = fieldNode(p, f.secret && mask)
		}
		keys := strings.Split(f.name, ".")
		m := root
		for _, k := range keys[:len(keys)-1] {
			m = child(m, k)
		}
		addPair(m, keys[len(keys)-1], val)
	}
	return root, nil
}

func fieldNode(p any, secret bool) *yaml.Node {
	switch p := p.(type) {
	case *string:
		if secret && *p != "" {
			return strNode(mask)
		}
		return strNode(*p)
	case *[]string:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle}
		for _, s := range *p {
			n.Content = append(n.Content, strNode(s))
		}
		return n
	case *time.Duration:
		return strNode(formatDuration(*p))
	}
	n, err := valueNode(reflect.ValueOf(p).Elem().Interface())
	if err != nil {
		panic(fmt.Sprintf("config: encoding %T: %v", p, err))
	}
	return n
}

// handlerFields adds the configuration of h to its mapping m: the decoded
// value when it is a struct (defaults included), otherwise the raw keys.
func handlerFields(m *yaml.Node, h Handler, reg *handler.Registry, mask bool) error {
	spec, ok := reg.Lookup(h.Type)
	if !ok {
		return fmt.Errorf("unknown handler type %q: cannot tell its secrets", h.Type)
	}
	secret := map[string]bool{}
	for _, f := range handlerconfig.Fields(spec) {
		if f.Secret && mask {
			secret[f.Name] = true
		}
	}
	v := indirect(reflect.ValueOf(h.Decoded))
	if v.Kind() == reflect.Struct {
		var def reflect.Value
		if spec.Config != nil {
			def = indirect(reflect.ValueOf(spec.Config()))
		}
		if def.Type() != v.Type() {
			def = reflect.Value{}
		}
		return structFields(m, v, def, "", secret)
	}
	return rawFields(m, h.Raw, "", secret)
}

// structFields adds the fields of v tagged `config` to m, leaving out those
// that are zero in both v and the defaults def (when def is valid).
func structFields(m *yaml.Node, v, def reflect.Value, prefix string, secret map[string]bool) error {
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		name, ok := sf.Tag.Lookup("config")
		name, _, _ = strings.Cut(name, ",")
		if !ok || name == "-" || name == "" || !sf.IsExported() {
			continue
		}
		fv := v.Field(i)
		var dv reflect.Value
		if def.IsValid() {
			dv = def.Field(i)
		}
		if sf.Type.Kind() == reflect.Struct && sf.Type != reflect.TypeFor[time.Duration]() {
			sub := mappingNode()
			if err := structFields(sub, fv, dv, prefix+name+".", secret); err != nil {
				return err
			}
			if len(sub.Content) > 0 {
				addPair(m, name, sub)
			}
			continue
		}
		if fv.IsZero() && (!dv.IsValid() || dv.IsZero()) {
			continue
		}
		var val *yaml.Node
		switch d, isDuration := fv.Interface().(time.Duration); {
		case secret[prefix+name] && !fv.IsZero():
			val = strNode(mask)
		case isDuration:
			val = strNode(formatDuration(d))
		default:
			var err error
			if val, err = valueNode(fv.Interface()); err != nil {
				return fmt.Errorf("handler field %s%s: %w", prefix, name, err)
			}
		}
		addPair(m, name, val)
	}
	return nil
}

// rawFields adds raw, sorted by key, to m, masking the secret keys.
func rawFields(m *yaml.Node, raw map[string]any, prefix string, secret map[string]bool) error {
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		v := raw[k]
		if sub, ok := v.(map[string]any); ok {
			n := mappingNode()
			if err := rawFields(n, sub, prefix+k+".", secret); err != nil {
				return err
			}
			addPair(m, k, n)
			continue
		}
		if secret[prefix+k] && v != nil && v != "" {
			v = mask
		}
		n, err := valueNode(v)
		if err != nil {
			return fmt.Errorf("handler key %s%s: %w", prefix, k, err)
		}
		addPair(m, k, n)
	}
	return nil
}

func indirect(v reflect.Value) reflect.Value {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return reflect.Value{}
		}
		v = v.Elem()
	}
	return v
}

func mappingNode() *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"} }

func strNode(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

func valueNode(v any) (*yaml.Node, error) {
	var n yaml.Node
	if err := n.Encode(v); err != nil {
		return nil, err
	}
	return &n, nil
}

func addPair(m *yaml.Node, key string, v *yaml.Node) {
	m.Content = append(m.Content, strNode(key), v)
}

// child returns the mapping under key in m, adding it when missing.
func child(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	n := mappingNode()
	addPair(m, key, n)
	return n
}
