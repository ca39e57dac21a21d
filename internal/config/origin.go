package config

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/wowd/wowd/handler"
)

// Origins records where the values of a configuration came from.
type Origins struct {
	file string              // the file's name, as given to Parse
	pos  map[string]position // key path → where the file has it; line 0 for keys --set added
	env  map[string]string   // key path → the WOW_* variable that set it
	set  map[string]string   // key path → the --set pair that set it

	metadata bool // wow.metadata is set: contexts not in the file come from it
}

// Of says where the value of the key at path (wow.log.level,
// wow.dispatchers.cart.handler.url) came from: "--set", "env WOW_X",
// "<file>:<line>", "wow.metadata" for contexts read from it, or "default"
// (also for values computed from others, such as a context's alias). A list
// or mapping is "--set" when --set gave any part of it.
func (o *Origins) Of(path string) string {
	if o == nil {
		return "default"
	}
	for p := path; p != ""; p = parent(p) {
		if _, ok := o.set[p]; ok {
			return "--set"
		}
	}
	for k := range o.set {
		// An item of the list at path, or an entry of the mapping at
		// path (a secret mapping is printed masked, as one value).
		if strings.HasPrefix(k, path+"[") || strings.HasPrefix(k, path+".") {
			return "--set"
		}
	}
	if v, ok := o.env[path]; ok {
		return "env " + v
	}
	if at, ok := o.pos[path]; ok && at.line > 0 {
		return o.file + ":" + strconv.Itoa(at.line)
	}
	if o.metadata && strings.HasPrefix(path, "wow.contexts.") {
		if _, inline := o.pos["wow.contexts"]; !inline {
			return "wow.metadata"
		}
	}
	return "default"
}

// WriteOrigins writes the effective configuration as WriteYAML does, each
// value followed by a comment saying where it came from (see [Origins.Of]).
func (c *Config) WriteOrigins(w io.Writer, reg *handler.Registry, o *Origins) error {
	root, err := c.tree(reg, true)
	if err != nil {
		return err
	}
	o.annotate("", root)
	c.annotateGroups(root)
	return encode(w, root)
}

// annotateGroups comments each dispatcher of the tree with the consumer
// groups its receivers join (GroupID), which group-id, a derived default
// or an override with a suffix per context, does not show as a value.
func (c *Config) annotateGroups(root *yaml.Node) {
	ds := mappingAt(root, "wow", "dispatchers")
	if ds == nil {
		return
	}
	for i := 0; i+1 < len(ds.Content); i += 2 {
		name := ds.Content[i].Value
		d, ok := c.Dispatchers[name]
		if !ok {
			continue
		}
		var groups []string
		for _, ctxName := range d.Contexts {
			if bc, ok := c.Contexts[ctxName]; ok && len(d.AggregatesOf(bc)) > 0 {
				groups = append(groups, c.GroupID(name, bc.Alias))
			}
		}
		if len(groups) > 0 {
			ds.Content[i].LineComment = "consumer groups: " + strings.Join(groups, ", ")
		}
	}
}

// mappingAt returns the mapping under the keys path of n, or nil.
func mappingAt(n *yaml.Node, path ...string) *yaml.Node {
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	for _, k := range path {
		var next *yaml.Node
		for i := 0; n.Kind == yaml.MappingNode && i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
				break
			}
		}
		if next == nil || next.Kind != yaml.MappingNode {
			return nil
		}
		n = next
	}
	return n
}

// annotate sets the line comment of every value under n, a mapping at path,
// to its origin.
func (o *Origins) annotate(path string, n *yaml.Node) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		p := n.Content[i].Value
		if path != "" {
			p = path + "." + p
		}
		v := n.Content[i+1]
		if v.Kind == yaml.MappingNode && len(v.Content) > 0 {
			o.annotate(p, v)
			continue
		}
		v.LineComment = o.Of(p)
	}
}

// flatten returns every value of the configuration by key path, secrets
// included, lists and empty mappings as one flow-style value: what reload
// compares.
func (c *Config) flatten(reg *handler.Registry) (map[string]string, error) {
	root, err := c.tree(reg, false)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	var walk func(path string, n *yaml.Node) error
	walk = func(path string, n *yaml.Node) error {
		if n.Kind == yaml.MappingNode && len(n.Content) > 0 {
			for i := 0; i+1 < len(n.Content); i += 2 {
				p := n.Content[i].Value
				if path != "" {
					p = path + "." + p
				}
				if err := walk(p, n.Content[i+1]); err != nil {
					return err
				}
			}
			return nil
		}
		if n.Kind == yaml.ScalarNode {
			out[path] = n.Value
			return nil
		}
		b, err := yaml.Marshal(n)
		if err != nil {
			return fmt.Errorf("flattening %s: %w", path, err)
		}
		out[path] = strings.TrimSpace(string(b))
		return nil
	}
	return out, walk("", root)
}
