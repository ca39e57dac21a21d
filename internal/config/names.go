package config

import (
	"fmt"
	"maps"
	"slices"
)

// The names of the Kafka consumer groups and clients a configuration makes.
// The daemon names its groups and clients with these functions, and
// validation checks with them that no two receivers share a name, so the
// two cannot disagree.

// GroupID returns the consumer group of dispatcher's receiver for the
// bounded context with alias: <service>.<dispatcher>.<alias> by default;
// the dispatcher's group-id when it consumes one context, else
// <group-id>.<alias>.
func (c *Config) GroupID(dispatcher, alias string) string {
	d := c.Dispatchers[dispatcher]
	switch {
	case d.GroupID == "":
		return c.Service + "." + dispatcher + "." + alias
	case len(d.Contexts) == 1:
		return d.GroupID
	default:
		return d.GroupID + "." + alias
	}
}

// ClientID returns the Kafka client ID of dispatcher's receiver for the
// bounded context with alias: <wow.kafka.client-id>-<dispatcher>-<alias>.
// Its metrics are labelled with it.
func (c *Config) ClientID(dispatcher, alias string) string {
	return c.Kafka.ClientID + "-" + dispatcher + "-" + alias
}

// ParkingClientID returns the client ID of the clients that keep the
// parked aggregates of dispatcher's receiver for the context with alias.
func (c *Config) ParkingClientID(dispatcher, alias string) string {
	return c.ClientID(dispatcher, alias) + "-parking"
}

// IngestClientID returns the client ID of the ingest endpoint's producer.
func (c *Config) IngestClientID() string {
	return c.Kafka.ClientID + "-ingest"
}

// AggregatesOf returns the aggregates of bc that d consumes: all of them
// unless d names some.
func (d Dispatcher) AggregatesOf(bc Context) []string {
	if len(d.Aggregates) == 0 {
		return bc.Aggregates
	}
	var out []string
	for _, a := range bc.Aggregates {
		if slices.Contains(d.Aggregates, a) {
			out = append(out, a)
		}
	}
	return out
}

// maxClientID is the longest client ID the Kafka client takes.
const maxClientID = 256

// validateNames checks that every receiver has a consumer group and client
// IDs of its own. Two receivers in one group would split the partitions of
// the topics both read between their handlers, each message reaching only
// one of them, and tie their rebalances, rewinds (which wait for an empty
// group) and parking leases together even on topics they do not share; two
// clients with one ID would collide in the client metrics, whose
// registration refuses the second. Names are built by joining with '.' and
// '-', which names may contain, so distinct dispatchers and contexts can
// still meet: a.b + c and a + b.c.
func (d *decoder) validateNames(c *Config) {
	// The commands' clients add the longest suffix, "-rewind" and
	// "-parked"; the ingest producer's is "-ingest".
	if n := len(c.Kafka.ClientID) + len("-rewind"); n > maxClientID {
		d.errorf("wow.kafka.client-id", "must be at most %d bytes, got %d (wowd's clients add suffixes to it, up to %d bytes in all)",
			maxClientID-len("-rewind"), len(c.Kafka.ClientID), maxClientID)
	}
	type owner struct{ what, dispatcher, context string }
	groups := map[string]owner{}
	clients := map[string]owner{}
	if c.Ingest.Enabled {
		clients[c.IngestClientID()] = owner{what: "ingest producer"}
	}
	describe := func(o owner) string {
		if o.dispatcher == "" {
			return "client ID of the " + o.what
		}
		return fmt.Sprintf("%s of dispatcher %s's receiver for context %s", o.what, o.dispatcher, o.context)
	}
	// A context whose alias is another's is reported as such; the names
	// it would share follow from it.
	aliasOf := map[string]string{} // alias → its first context
	for _, name := range slices.Sorted(maps.Keys(c.Contexts)) {
		if _, dup := aliasOf[c.Contexts[name].Alias]; !dup {
			aliasOf[c.Contexts[name].Alias] = name
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Dispatchers)) {
		disp, path := c.Dispatchers[name], "wow.dispatchers."+name
		for _, ctxName := range disp.Contexts {
			bc, ok := c.Contexts[ctxName]
			if !ok || len(disp.AggregatesOf(bc)) == 0 || aliasOf[bc.Alias] != ctxName {
				continue // no receiver, or a problem reported on its own
			}
			group := c.GroupID(name, bc.Alias)
			if o, dup := groups[group]; dup {
				at := path
				if disp.GroupID != "" {
					at += ".group-id"
				}
				d.errorf(at, "consumer group %q of the receiver for context %s is also the %s: the two would be members of one group: on topics they share each message reaches only one of their handlers, and on others each one's rebalances, rewinds and parking checks involve the other; set group-id to tell them apart",
					group, ctxName, describe(o))
			} else {
				groups[group] = owner{"group", name, ctxName}
			}
			ids := []struct{ id, what string }{{c.ClientID(name, bc.Alias), "client ID"}}
			if disp.FailurePolicy() == OnFailurePark {
				ids = append(ids, struct{ id, what string }{c.ParkingClientID(name, bc.Alias), "parking client ID"})
			}
			for _, id := range ids {
				if len(id.id) > maxClientID {
					d.errorf(path, "Kafka client ID %q of the receiver for context %s is %d bytes, more than the Kafka client takes (%d): shorten wow.kafka.client-id, the dispatcher's name or the context's alias",
						id.id, ctxName, len(id.id), maxClientID)
					break
				}
				if o, dup := clients[id.id]; dup {
					d.errorf(path, "Kafka client ID %q of the receiver for context %s is also the %s: client IDs tell the clients' metrics and broker logs apart; rename the dispatcher or the context's alias",
						id.id, ctxName, describe(o))
					break // its parking client's ID follows from it
				} else {
					clients[id.id] = owner{id.what, name, ctxName}
				}
			}
		}
	}
}
