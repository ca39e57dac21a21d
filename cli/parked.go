package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/wowd/wowd/internal/config"
	"github.com/wowd/wowd/internal/daemon"
	"github.com/wowd/wowd/internal/park"
)

// parkedTimeout bounds one `wowd parked` verb's talk with Kafka.
const parkedTimeout = 30 * time.Second

func (a *app) parkedCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "parked",
		Short: "See and act on parked aggregates",
		Long: `See and act on the aggregates a dispatcher parked (on-failure: park).

A message that failed for good parks its aggregate: it and the aggregate's
later messages wait, in order, in <topic>.parked, while other aggregates go
on. These verbs read the dispatcher's state topic (wowd-parked.<service>.
<dispatcher>) and ask the wowd instance that owns the aggregate's partition
to act; it does so in the aggregate's order, now or when it next owns it.

  list      the parked aggregates (all, or one with --aggregate)
  show      an aggregate's parked messages
  redrive   handle the parked messages in order, then unpark
  skip      dead-letter the head, redrive the rest
  discard   dead-letter every parked message, unpark`,
	}
	var dispatcher, aggregate, topic string
	flags := func(c *cobra.Command, needAggregate bool) *cobra.Command {
		a.configFlag(c, "", "configuration file")
		c.Flags().StringVar(&dispatcher, "dispatcher", "", "dispatcher name (required)")
		aggHelp := "aggregate ID (required)"
		if !needAggregate {
			aggHelp = "aggregate ID: only this aggregate"
		}
		aggHelp += `; one the tables show quoted ("cart-\xff") as they show it`
		c.Flags().StringVar(&aggregate, "aggregate", "", aggHelp)
		c.Flags().StringVar(&topic, "topic", "", "source topic, when the aggregate ID is parked in several")
		_ = c.MarkFlagRequired("dispatcher")
		return c
	}
	verb := func(use, short string, needAggregate bool, run func(ctx context.Context, p *parkedOps) error) *cobra.Command {
		return flags(&cobra.Command{
			Use:   use,
			Short: short,
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				if needAggregate && aggregate == "" {
					return configError(errors.New("--aggregate is required"))
				}
				id, err := aggregateID(aggregate)
				if err != nil {
					return err
				}
				p, err := a.parkedOps(cmd, dispatcher)
				if err != nil {
					return err
				}
				defer p.close()
				if topic != "" && !slices.Contains(p.topics, topic) {
					// It would match nothing: an empty list, or "not parked".
					return configError(fmt.Errorf("--topic %q: dispatcher %s consumes no such topic (its topics: %s)",
						topic, dispatcher, strings.Join(p.topics, ", ")))
				}
				p.aggregate, p.topic = id, topic
				ctx, cancel := context.WithTimeout(cmd.Context(), parkedTimeout)
				defer cancel()
				return run(ctx, p)
			},
		}, needAggregate)
	}
	cmd.AddCommand(
		verb("list", "List the parked aggregates", false, func(ctx context.Context, p *parkedOps) error { return p.list(ctx) }),
		verb("show", "Show an aggregate's parked messages", true, func(ctx context.Context, p *parkedOps) error { return p.show(ctx) }),
		verb("redrive", "Handle an aggregate's parked messages in order, then unpark it", true,
			func(ctx context.Context, p *parkedOps) error { return p.ask(ctx, park.Redrive) }),
		verb("skip", "Dead-letter an aggregate's head parked message, redrive the rest", true,
			func(ctx context.Context, p *parkedOps) error { return p.ask(ctx, park.Skip) }),
		verb("discard", "Dead-letter all of an aggregate's parked messages, unpark it", true,
			func(ctx context.Context, p *parkedOps) error { return p.ask(ctx, park.Discard) }),
	)
	return cmd
}

// aggregateID reads --aggregate: an ID as it is, or, when it starts with
// a double quote, quoted with Go escapes as wowd status, wowd parked list
// and the status page show an ID that is not plain text (bytes that are
// not UTF-8, control characters, a leading quote or white space; see
// printable.String): "cart-\xff" names the ID of the byte 0xff, and an ID
// that starts with a quote is given quoted too.
func aggregateID(flag string) (string, error) {
	if !strings.HasPrefix(flag, `"`) {
		return flag, nil
	}
	id, err := strconv.Unquote(flag)
	switch {
	case err != nil:
		return "", configError(fmt.Errorf("--aggregate %s: starts with a double quote, but is not an ID quoted with Go escapes as wowd status shows one (an ID that starts with a quote is given quoted: %s)",
			termSafe(flag), strconv.Quote(flag)))
	case id == "":
		return "", configError(fmt.Errorf("--aggregate %s: an empty ID", flag))
	}
	return id, nil
}

// parkedOps is one `wowd parked` verb's view of a dispatcher's parking.
type parkedOps struct {
	a          *app
	service    string
	dispatcher string
	deadLetter bool // the dispatcher's dead letters are enabled: skip and discard need them
	stateTopic string
	topics     []string // the dispatcher's topics, sorted
	opts       []kgo.Opt
	cl         *kgo.Client
	adm        *kadm.Client

	aggregate, topic string
}

func (a *app) parkedOps(cmd *cobra.Command, dispatcher string) (*parkedOps, error) {
	cfg, _, err := a.loadDocument(cmd)
	if err != nil {
		return nil, err
	}
	d, ok := cfg.Dispatchers[dispatcher]
	if !ok {
		names := make([]string, 0, len(cfg.Dispatchers))
		for n := range cfg.Dispatchers {
			names = append(names, n)
		}
		sort.Strings(names)
		return nil, configError(fmt.Errorf("--dispatcher: unknown dispatcher %q (configured: %s)", dispatcher, strings.Join(names, ", ")))
	}
	if d.FailurePolicy() != config.OnFailurePark {
		return nil, configError(fmt.Errorf("--dispatcher: dispatcher %q does not park aggregates (on-failure: %s)", dispatcher, d.FailurePolicy()))
	}
	opts, err := daemon.ClientOptions(cfg.Kafka, cfg.Kafka.ClientID+"-parked", zap.NewNop(), nil)
	if err != nil {
		return nil, configError(err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return &parkedOps{a: a, service: cfg.Service, deadLetter: d.DeadLetter.Enabled, dispatcher: dispatcher, stateTopic: park.StateTopic(cfg.Service, dispatcher), topics: daemon.DispatcherTopics(cfg, d), opts: opts, cl: cl, adm: kadm.NewClient(cl)}, nil
}

func (p *parkedOps) close() { p.cl.Close() }

// states returns the dispatcher's parked aggregates (of --aggregate and
// --topic, when given), sorted by topic and aggregate.
func (p *parkedOps) states(ctx context.Context) ([]*park.State, error) {
	all, err := park.ReadState(ctx, p.opts, p.adm, p.stateTopic)
	if err != nil {
		return nil, err
	}
	var out []*park.State
	for _, s := range all {
		if s.Service != p.service || s.Dispatcher != p.dispatcher || (p.aggregate != "" && s.Aggregate != p.aggregate) || (p.topic != "" && s.Topic != p.topic) {
			continue
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *park.State) int { return strings.Compare(a.Key(), b.Key()) })
	return out, nil
}

// one returns the parked state of --aggregate.
func (p *parkedOps) one(ctx context.Context) (*park.State, error) {
	ss, err := p.states(ctx)
	if err != nil {
		return nil, err
	}
	switch len(ss) {
	case 0:
		return nil, fmt.Errorf("aggregate %q is not parked by dispatcher %s", p.aggregate, p.dispatcher)
	case 1:
		return ss[0], nil
	}
	topics := make([]string, len(ss))
	for i, s := range ss {
		topics[i] = termSafe(s.Topic)
	}
	return nil, configError(fmt.Errorf("--topic: aggregate %q is parked in several topics (%s): name one", p.aggregate, strings.Join(topics, ", ")))
}

func (p *parkedOps) list(ctx context.Context) error {
	ss, err := p.states(ctx)
	if err != nil {
		return err
	}
	return writeParkedList(p.a.stdout, ss, time.Now())
}

// writeParkedList prints the parked aggregates ss as a table.
func writeParkedList(out io.Writer, ss []*park.State, now time.Time) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TOPIC\tPARTITION\tAGGREGATE\tPARKED\tCLASS\tREASON\tPENDING")
	for _, s := range ss {
		pending := "-"
		if s.Request != nil {
			pending = termSafe(s.Request.Action) + " by " + termSafe(s.Request.By)
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s ago\t%s\t%s\t%s\n", termSafe(s.Topic), s.Partition, termSafe(s.Aggregate),
			now.Sub(s.Since).Round(time.Second), termSafe(s.Class), termSafe(oneLine(parkReason(s), 60)), pending)
	}
	return w.Flush()
}

func (p *parkedOps) show(ctx context.Context) error {
	s, err := p.one(ctx)
	if err != nil {
		return err
	}
	recs, err := park.Parked(ctx, p.opts, p.adm, s)
	if err != nil {
		return err
	}
	return writeParkedShow(p.a.stdout, s, recs, time.Now())
}

// writeParkedShow prints the parked aggregate s and its parked records.
func writeParkedShow(out io.Writer, s *park.State, recs []*kgo.Record, now time.Time) error {
	fmt.Fprintf(out, "aggregate %s of %s (partition %d), parked %s ago: %s: %s\n\n", termSafe(s.Aggregate), termSafe(s.Topic), s.Partition,
		now.Sub(s.Since).Round(time.Second), termSafe(s.Class), termSafe(parkReason(s)))
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SOURCE OFFSET\tPARKED AT\tTIMESTAMP\tBYTES\tREASON")
	for _, r := range recs {
		src, err := park.Source(r)
		if err != nil {
			return err
		}
		reason := ""
		for _, h := range r.Headers {
			if h.Key == park.HeaderReason {
				reason = string(h.Value)
			}
		}
		fmt.Fprintf(w, "%d\t%s/%d@%d\t%s\t%d\t%s\n", src.Offset, termSafe(r.Topic), r.Partition, r.Offset,
			r.Timestamp.UTC().Format(time.RFC3339), len(r.Value), termSafe(oneLine(reason, 60)))
	}
	return w.Flush()
}

func (p *parkedOps) ask(ctx context.Context, action string) error {
	if action != park.Redrive && !p.deadLetter {
		return configError(fmt.Errorf("%s writes to the dead-letter topic, and dispatcher %s has wow.dispatchers.%s.dead-letter.enabled false", action, p.dispatcher, p.dispatcher))
	}
	s, err := p.one(ctx)
	if err != nil {
		return err
	}
	if err := park.Ask(ctx, p.cl, p.stateTopic, s, action, asker()); err != nil {
		return err
	}
	_, err = fmt.Fprintf(p.a.stdout, "asked for %s of aggregate %s (%s, partition %d); the instance that owns the partition does it in the aggregate's order (see wowd_parked_actions_total and its log)\n",
		action, termSafe(s.Aggregate), termSafe(s.Topic), s.Partition)
	return err
}

// asker names who runs the command, for the owner's log: user@host.
func asker() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}

// parkReason is why the aggregate parked: the reason of the message that
// failed, said to be past once an action's progress moved the head past
// that message (park.State.HeadPastFailure): the head then has not
// failed, and a skip dead-letters none of the parked messages.
func parkReason(s *park.State) string {
	if s.HeadPastFailure() {
		return "head past the failed message: " + s.Reason
	}
	return s.Reason
}

// oneLine returns s with its runs of white space made one space each, cut
// to n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
