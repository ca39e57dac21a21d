package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/internal/daemon"
	"github.com/wowd/wowd/internal/rewind"
)

func (a *app) rewindCmd() *cobra.Command {
	var (
		dispatcher, contextName, to string
		execute                     bool
		timeout                     time.Duration
	)
	cmd := &cobra.Command{
		Use:   "rewind --dispatcher D [--context C] --to <RFC 3339 time | earliest | latest> [--execute]",
		Short: "Move a stopped dispatcher's committed offsets to a time, to replay from there",
		Long: `Plan, and with --execute commit, new offsets for the consumer groups of a
dispatcher (one per bounded context, or only --context's): per partition of
its topics, the first record at or after --to (an RFC 3339 time), or the start
(earliest) or end (latest) of the partition. The plan shows each partition's
committed offset, the new one and the records to replay (committed − new;
negative skips ahead). Nothing is committed without --execute.

The dispatcher must be stopped first (scale it to zero): while a group has
members, rewind refuses and names them. Exit code 0 when done, 1 on a runtime
failure or refusal, 2 on a usage or configuration error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dispatcher == "" {
				return configError(errors.New("--dispatcher is required"))
			}
			if timeout <= 0 {
				return usageError(fmt.Errorf("--timeout %s: want more than 0", timeout))
			}
			target, err := rewind.ParseTarget(to)
			if err != nil {
				return configError(fmt.Errorf("--to: %w", err))
			}
			cfg, _, err := a.loadDocument(cmd)
			if err != nil {
				return err
			}
			receivers, err := rewind.Receivers(cfg, dispatcher, contextName)
			var ue *rewind.UsageError
			if errors.As(err, &ue) {
				return configError(err)
			}
			if err != nil {
				return err
			}
			if len(receivers) == 0 {
				return configError(fmt.Errorf("dispatcher %s consumes no topic of its contexts: nothing to rewind", dispatcher))
			}
			opts, err := daemon.ClientOptions(cfg.Kafka, cfg.Kafka.ClientID+"-rewind", nil, nil)
			var ce *daemon.ConfigError
			if errors.As(err, &ce) {
				return configError(err)
			}
			if err != nil {
				return err
			}
			cl, err := kgo.NewClient(opts...)
			if err != nil {
				return fmt.Errorf("kafka client: %w", err)
			}
			defer cl.Close()
			adm := kadm.NewClient(cl)
			groups := rewind.Describer(adm, cfg.Kafka.GroupProtocol)
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()

			plan, err := rewind.MakePlan(ctx, adm, groups, receivers, target)
			if err != nil {
				return err
			}
			if err := rewind.Write(a.stdout, plan); err != nil {
				return err
			}
			if !execute {
				_, err := fmt.Fprintln(a.stdout, "nothing committed: run again with --execute to commit this plan")
				return err
			}
			n, err := rewind.Execute(ctx, adm, groups, receivers, plan)
			if err != nil {
				return fmt.Errorf("committed %d of %d offsets: %w", n, len(plan.Rows), err)
			}
			_, err = fmt.Fprintf(a.stdout, "committed %d offsets\n", n)
			return err
		},
	}
	a.configFlag(cmd, "", "configuration file")
	cmd.Flags().StringVar(&dispatcher, "dispatcher", "", "the dispatcher to rewind (required)")
	cmd.Flags().StringVar(&contextName, "context", "", "only its receiver of this bounded context (default: all of them)")
	cmd.Flags().StringVar(&to, "to", "", "an RFC 3339 time (2026-12-01T10:00:00Z), earliest or latest (required)")
	cmd.Flags().BoolVar(&execute, "execute", false, "commit the plan (without it, only print it)")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "bound on the whole rewind, Kafka requests included")
	return cmd
}
