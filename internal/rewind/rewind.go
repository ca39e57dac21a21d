// Package rewind moves the committed offsets of a dispatcher's consumer
// groups to a point in time, so that its receivers replay (or skip) the
// records from there when they start again: `wowd rewind`.
//
// A plan is computed first: for each receiver (dispatcher × context) its
// group, for each partition of its topics the offset committed now and the
// offset for the target (the first record at or after a time, the start or
// the end of the partition). Executing it commits the new offsets, which
// Kafka accepts only while the group has no members: the dispatcher must be
// stopped first, and both Plan and Execute refuse, naming the members,
// while it is not.
package rewind

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
	"github.com/wowd/wowd/internal/daemon"
	"github.com/wowd/wowd/internal/wow"
)

// Target is where a rewind moves the offsets: the start of each partition,
// its end, or the first record at or after a time.
type Target struct {
	Earliest, Latest bool
	At               time.Time // when neither
}

// ParseTarget reads --to: earliest, latest or an RFC 3339 time.
func ParseTarget(s string) (Target, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "earliest":
		return Target{Earliest: true}, nil
	case "latest":
		return Target{Latest: true}, nil
	case "":
		return Target{}, errors.New("want earliest, latest or an RFC 3339 time such as 2026-12-01T10:00:00Z")
	}
	at, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(s))
	if err != nil {
		return Target{}, fmt.Errorf("%q: want earliest, latest or an RFC 3339 time such as 2026-12-01T10:00:00Z", s)
	}
	if at.UnixMilli() < 0 {
		// Kafka's timestamps start at the epoch, and a negative one asks
		// the broker for something else (-1 is the end of the log).
		return Target{}, fmt.Errorf("%q is before 1970-01-01T00:00:00Z, where Kafka's timestamps start: use earliest", s)
	}
	return Target{At: at}, nil
}

func (t Target) String() string {
	switch {
	case t.Earliest:
		return "earliest"
	case t.Latest:
		return "latest"
	}
	return t.At.UTC().Format(time.RFC3339Nano)
}

// Receiver is one receiver of a dispatcher: its consumer group and topics.
type Receiver struct {
	Context string
	Group   string
	Topics  []string // sorted
}

// UsageError is a rewind asked for something the configuration does not
// have: an unknown dispatcher or context.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Receivers returns the receivers of dispatcher in cfg, one per bounded
// context it consumes, or only the one of context when it is not empty,
// sorted by context. The group and topics are those the daemon uses.
func Receivers(cfg *config.Config, dispatcher, context string) ([]Receiver, error) {
	d, ok := cfg.Dispatchers[dispatcher]
	if !ok {
		return nil, &UsageError{fmt.Errorf("--dispatcher %q: no such dispatcher in the configuration (dispatchers: %s)",
			dispatcher, strings.Join(slices.Sorted(maps.Keys(cfg.Dispatchers)), ", "))}
	}
	contexts := slices.Sorted(slices.Values(d.Contexts))
	if context != "" {
		if !slices.Contains(contexts, context) {
			return nil, &UsageError{fmt.Errorf("--context %q: dispatcher %s consumes no such context (its contexts: %s)",
				context, dispatcher, strings.Join(contexts, ", "))}
		}
		contexts = []string{context}
	}
	var out []Receiver
	for _, name := range contexts {
		bc := cfg.Contexts[name]
		r := Receiver{Context: name, Group: daemon.GroupID(cfg, dispatcher, bc.Alias)}
		for _, agg := range bc.Aggregates {
			if len(d.Aggregates) > 0 && !slices.Contains(d.Aggregates, agg) {
				continue
			}
			for _, k := range d.Topics {
				kind, err := handler.ParseKind(k)
				if err != nil {
					return nil, fmt.Errorf("wow.dispatchers.%s.topics: %w", dispatcher, err) // validated with the configuration
				}
				r.Topics = append(r.Topics, wow.Topic(cfg.Kafka.TopicPrefix, bc.Alias, agg, kind))
			}
		}
		if len(r.Topics) == 0 {
			continue // the dispatcher's aggregates filter leaves nothing here: no receiver
		}
		slices.Sort(r.Topics)
		out = append(out, r)
	}
	return out, nil
}

// Row is the plan of one partition.
type Row struct {
	Group     string
	Topic     string
	Partition int32
	Committed int64 // -1: nothing committed
	New       int64
}

// Replay is how many records the receiver handles again from the new
// offset: committed − new; negative skips ahead. It is false when nothing
// was committed.
func (r Row) Replay() (int64, bool) {
	if r.Committed < 0 {
		return 0, false
	}
	return r.Committed - r.New, true
}

// Plan is a rewind's plan.
type Plan struct {
	Target  Target
	Rows    []Row    // by group, topic, partition
	Missing []string // topics of the receivers that do not exist: nothing to rewind there
}

// ActiveError refuses a rewind of groups with members.
type ActiveError struct {
	Members map[string][]string // by group: "member-id (client-id on host)"
}

func (e *ActiveError) Error() string {
	var b strings.Builder
	b.WriteString("the dispatcher is running: stop it first (scale it to zero) so that its groups have no members")
	for _, g := range slices.Sorted(maps.Keys(e.Members)) {
		fmt.Fprintf(&b, "\n  group %s: %s", g, strings.Join(e.Members[g], ", "))
	}
	return b.String()
}

// Groups describes consumer groups: their members, by client id and host.
type Groups interface {
	Members(ctx context.Context, groups []string) (map[string][]string, error)
}

// Describer returns the Groups of a cluster for groups of protocol
// (wow.kafka.group-protocol): classic or consumer (KIP-848).
func Describer(adm *kadm.Client, protocol string) Groups {
	if protocol == "consumer" {
		return consumerGroups{adm}
	}
	return classicGroups{adm}
}

type classicGroups struct{ adm *kadm.Client }

func (c classicGroups) Members(ctx context.Context, groups []string) (map[string][]string, error) {
	described, err := c.adm.DescribeGroups(ctx, groups...)
	if err != nil {
		return nil, fmt.Errorf("describing the groups: %w", err)
	}
	out := map[string][]string{}
	for _, g := range groups {
		d := described[g]
		if d.Err != nil && !errors.Is(d.Err, kerr.GroupIDNotFound) { // no group yet: no members
			return nil, fmt.Errorf("describing group %s: %w", g, d.Err)
		}
		for _, m := range d.Members {
			out[g] = append(out[g], member(m.MemberID, m.ClientID, m.ClientHost))
		}
	}
	return out, nil
}

type consumerGroups struct{ adm *kadm.Client }

func (c consumerGroups) Members(ctx context.Context, groups []string) (map[string][]string, error) {
	described, err := c.adm.DescribeConsumerGroups(ctx, groups...)
	if err != nil {
		return nil, fmt.Errorf("describing the groups: %w", err)
	}
	out := map[string][]string{}
	for _, g := range groups {
		d := described[g]
		if d.Err != nil && !errors.Is(d.Err, kerr.GroupIDNotFound) { // no group yet: no members
			return nil, fmt.Errorf("describing group %s: %w", g, d.Err)
		}
		for _, m := range d.Members {
			out[g] = append(out[g], member(m.MemberID, m.ClientID, m.ClientHost))
		}
	}
	return out, nil
}

func member(id, client, host string) string {
	return fmt.Sprintf("%s (%s on %s)", id, client, strings.TrimPrefix(host, "/"))
}

// checkIdle refuses when a group of receivers has members.
func checkIdle(ctx context.Context, groups Groups, receivers []Receiver) error {
	names := make([]string, len(receivers))
	for i, r := range receivers {
		names[i] = r.Group
	}
	members, err := groups.Members(ctx, names)
	if err != nil {
		return err
	}
	for g, ms := range members {
		if len(ms) == 0 {
			delete(members, g)
		}
	}
	if len(members) > 0 {
		return &ActiveError{Members: members}
	}
	return nil
}

// MakePlan computes the plan of receivers for target. It refuses while a
// group has members: their commits would undo the rewind.
func MakePlan(ctx context.Context, adm *kadm.Client, groups Groups, receivers []Receiver, target Target) (*Plan, error) {
	if err := checkIdle(ctx, groups, receivers); err != nil {
		return nil, err
	}
	topicSet := map[string]bool{}
	for _, r := range receivers {
		for _, t := range r.Topics {
			topicSet[t] = true
		}
	}
	topics := slices.Sorted(maps.Keys(topicSet))
	var (
		listed kadm.ListedOffsets
		err    error
	)
	switch {
	case target.Earliest:
		listed, err = adm.ListStartOffsets(ctx, topics...)
	case target.Latest:
		// The end of what is committed (the last stable offset): the
		// receivers read committed records only, and a transaction open
		// now is not there yet for them. The log's end (its high
		// watermark) would skip its records once it commits.
		listed, err = adm.ListCommittedOffsets(ctx, topics...)
	default:
		listed, err = adm.ListOffsetsAfterMilli(ctx, atOrAfterMilli(target.At), topics...)
		if err == nil {
			listed, err = belowOpen(ctx, adm, listed, topics)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("listing the offsets for %s: %w", target, err)
	}
	plan := &Plan{Target: target}
	missing := map[string]bool{}
	for _, r := range receivers {
		committed, err := adm.FetchOffsets(ctx, r.Group)
		if errors.Is(err, kerr.GroupIDNotFound) {
			committed, err = nil, nil // no group yet: nothing committed
		}
		if err != nil {
			return nil, fmt.Errorf("fetching the offsets of group %s: %w", r.Group, err)
		}
		for _, t := range r.Topics {
			parts := listed[t]
			if lo, ok := parts[-1]; ok && lo.Err != nil {
				if !errors.Is(lo.Err, kerr.UnknownTopicOrPartition) {
					// Not known missing (a leader moving, a topic being
					// created or deleted): a rewind that left it out would
					// be reported done while it was not.
					return nil, fmt.Errorf("listing the offsets of %s for %s: %w", t, target, lo.Err)
				}
				missing[t] = true
				continue
			}
			if len(parts) == 0 {
				missing[t] = true
				continue
			}
			for _, p := range slices.Sorted(maps.Keys(parts)) {
				lo := parts[p]
				if lo.Err != nil {
					return nil, fmt.Errorf("listing the offset of %s[%d] for %s: %w", t, p, target, lo.Err)
				}
				row := Row{Group: r.Group, Topic: t, Partition: p, Committed: -1, New: lo.Offset}
				if c, ok := committed.Lookup(t, p); ok {
					if c.Err != nil {
						return nil, fmt.Errorf("fetching the offset of group %s on %s[%d]: %w", r.Group, t, p, c.Err)
					}
					row.Committed = c.At
				}
				plan.Rows = append(plan.Rows, row)
			}
		}
	}
	plan.Missing = slices.Sorted(maps.Keys(missing))
	return plan, nil
}

// belowOpen holds the offsets listed for a time to the last stable offset
// of their partitions: what a read-committed lookup returns. The lookup by
// time reads uncommitted records, and finds a record of a transaction
// still open, or, past every record, the log's end: committed there, the
// group would skip the open transaction's records once it commits.
func belowOpen(ctx context.Context, adm *kadm.Client, listed kadm.ListedOffsets, topics []string) (kadm.ListedOffsets, error) {
	stable, err := adm.ListCommittedOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("the last stable offsets: %w", err)
	}
	for t, parts := range listed {
		for p, lo := range parts {
			if lo.Err != nil || p < 0 {
				continue // reported by MakePlan
			}
			so, ok := stable.Lookup(t, p)
			switch {
			case !ok:
				// Unchecked, the offset could be past an open transaction:
				// as for every other listing error, no plan.
				return nil, fmt.Errorf("the last stable offset of %s[%d]: not in the broker's answer", t, p)
			case so.Err != nil:
				return nil, fmt.Errorf("the last stable offset of %s[%d]: %w", t, p, so.Err)
			case so.Offset < lo.Offset:
				lo.Offset = so.Offset
				parts[p] = lo
			}
		}
	}
	return listed, nil
}

// atOrAfterMilli is the first millisecond at or after at: record
// timestamps are milliseconds, and a record in at's millisecond but before
// at (10:03:00.000 for 10:03:00.0005) is not at or after it.
func atOrAfterMilli(at time.Time) int64 {
	ms := at.UnixMilli()
	if at.After(time.UnixMilli(ms)) {
		ms++
	}
	return ms
}

// Execute commits plan, after checking again that its groups have no
// members; every partition's commit is checked. It returns how many
// offsets it committed.
func Execute(ctx context.Context, adm *kadm.Client, groups Groups, receivers []Receiver, plan *Plan) (int, error) {
	if err := checkIdle(ctx, groups, receivers); err != nil {
		return 0, err
	}
	byGroup := map[string]kadm.Offsets{}
	for _, r := range plan.Rows {
		os := byGroup[r.Group]
		os.Add(kadm.Offset{Topic: r.Topic, Partition: r.Partition, At: r.New, LeaderEpoch: -1})
		byGroup[r.Group] = os
	}
	n := 0
	var errs []error
	for _, g := range slices.Sorted(maps.Keys(byGroup)) {
		resp, err := adm.CommitOffsets(ctx, g, byGroup[g])
		if err != nil {
			errs = append(errs, fmt.Errorf("committing group %s: %w", g, err))
			continue
		}
		resp.Each(func(o kadm.OffsetResponse) {
			if o.Err != nil {
				errs = append(errs, fmt.Errorf("committing group %s on %s[%d]: %w", g, o.Topic, o.Partition, o.Err))
				return
			}
			n++
		})
	}
	return n, errors.Join(errs...)
}

// Write prints plan as a table, then the records it replays and those it
// skips, each summed on its own: a net figure would hide a partition that
// skips ahead (its committed offset behind a time) behind the others'
// replays. Each partition that skips ahead is named.
func Write(w io.Writer, plan *Plan) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tTOPIC\tPARTITION\tCOMMITTED\tNEW\tREPLAY")
	var replay, skip int64
	var ahead []Row
	for _, r := range plan.Rows {
		committed, shown := "-", "-"
		if n, ok := r.Replay(); ok {
			committed, shown = strconv.FormatInt(r.Committed, 10), strconv.FormatInt(n, 10)
			if n >= 0 {
				replay += n
			} else {
				skip -= n
				ahead = append(ahead, r)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\n", r.Group, r.Topic, r.Partition, committed, r.New, shown)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "to %s: %d partitions, %d records to replay, %d to skip\n", plan.Target, len(plan.Rows), replay, skip)
	if len(ahead) > 0 {
		fmt.Fprintf(w, "skipping ahead on %d %s: the records between the committed offset and the new one are never handled:", len(ahead), plural(len(ahead), "partition", "partitions"))
		const named = 5
		for i, r := range ahead {
			if i == named {
				fmt.Fprintf(w, " and %d more", len(ahead)-named)
				break
			}
			fmt.Fprintf(w, " %s %s[%d] %d->%d", r.Group, r.Topic, r.Partition, r.Committed, r.New)
		}
		fmt.Fprintln(w)
	}
	for _, t := range plan.Missing {
		fmt.Fprintf(w, "topic %s does not exist: nothing to rewind there\n", t)
	}
	return nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
