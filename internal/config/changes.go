package config

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/handlerconfig"
)

// Change is a key whose value differs between two configurations.
type Change struct {
	Path string // key path, e.g. wow.log.level
	// Reload says the change may be applied while running: the key is
	// in reloadFields (wow.log.level) or is a handler key tagged
	// reload:"true" of a dispatcher whose handler type is unchanged.
	// Any other change needs a restart.
	Reload bool
}

// Changes returns the keys whose values differ from old to cur, sorted by
// path. Secrets are compared too; only their paths are returned.
func Changes(old, cur *Config, reg *handler.Registry) ([]Change, error) {
	if reg == nil {
		reg = handler.Default()
	}
	a, err := old.flatten(reg)
	if err != nil {
		return nil, fmt.Errorf("reading the running configuration: %w", err)
	}
	b, err := cur.flatten(reg)
	if err != nil {
		return nil, fmt.Errorf("reading the new configuration: %w", err)
	}
	var out []Change
	for _, path := range slices.Sorted(maps.Keys(b)) {
		if va, ok := a[path]; !ok || va != b[path] {
			out = append(out, Change{Path: path, Reload: reloadable(path, old, cur, reg)})
		}
	}
	for path := range a {
		if _, ok := b[path]; !ok {
			out = append(out, Change{Path: path, Reload: reloadable(path, old, cur, reg)})
		}
	}
	slices.SortFunc(out, func(x, y Change) int { return strings.Compare(x.Path, y.Path) })
	return out, nil
}

// reloadable tells whether a change of the key at path may apply while
// running.
func reloadable(path string, old, cur *Config, reg *handler.Registry) bool {
	for _, f := range configFields {
		if "wow."+f.name == path {
			return reloadFields[f.name]
		}
	}
	// The longest dispatcher name the path starts with: names may hold dots.
	name := ""
	for n := range cur.Dispatchers {
		if strings.HasPrefix(path, "wow.dispatchers."+n+".handler.") && len(n) > len(name) {
			name = n
		}
	}
	if name == "" {
		return false
	}
	was, ok := old.Dispatchers[name]
	now := cur.Dispatchers[name]
	if !ok || was.Handler.Type != now.Handler.Type {
		return false
	}
	spec, ok := reg.Lookup(now.Handler.Type)
	if !ok {
		return false
	}
	key := strings.TrimPrefix(path, "wow.dispatchers."+name+".handler.")
	if key == "type" || key == "timeout" { // the dispatcher's, not the handler's
		return false
	}
	for _, f := range handlerconfig.Fields(spec) {
		if f.Reload && (key == f.Name || strings.HasPrefix(key, f.Name+".")) {
			return true
		}
	}
	return false
}
