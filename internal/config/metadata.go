package config

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/wowd/wowd/internal/wow"
)

// metadata reads wow.metadata and fills wow.contexts from it, or checks that
// both agree. A relative file path is relative to the configuration file.
// Reading a URL ends when ctx is done.
func (d *decoder) metadata(ctx context.Context, c *Config, file string) {
	if c.Metadata == "" {
		return
	}
	source := c.Metadata
	if !strings.Contains(source, "://") && !filepath.IsAbs(source) {
		source = filepath.Join(filepath.Dir(file), source)
	}
	timeout := c.MetadataTimeout
	if timeout <= 0 {
		// Refused by validate; the default lets the metadata's own
		// problems be reported with it.
		timeout = DefaultMetadataTimeout
	}
	m, err := wow.LoadMetadata(ctx, source, timeout)
	if err != nil {
		d.outsidef("wow.metadata", "%v", err)
		return
	}
	found := m.Contexts()
	if len(c.Contexts) == 0 {
		if len(found) == 0 {
			d.outsidef("wow.metadata", "%s lists no bounded context with aggregates", c.Metadata)
			return
		}
		c.Contexts = make(map[string]Context, len(found))
		for _, name := range slices.Sorted(maps.Keys(found)) {
			c.Contexts[name] = Context(found[name])
		}
		return
	}
	inline := make(map[string]wow.Context, len(c.Contexts))
	for name, ctx := range c.Contexts {
		inline[name] = ctx
	}
	if err := m.Agrees(inline); err != nil {
		var mm *wow.MismatchError
		if errors.As(err, &mm) {
			for _, diff := range mm.Differences {
				path := "wow.contexts." + diff.Context
				if diff.Aggregate != "" {
					path += ".aggregates"
				}
				d.outsidef(path, "disagrees with wow.metadata: %s", diff.String())
			}
			return
		}
		d.outsidef("wow.contexts", "disagrees with wow.metadata: %v", err)
	}
}

// DefaultMetadataTimeout bounds reading wow.metadata.
const DefaultMetadataTimeout = 10 * time.Second
