package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/wowd/wowd/internal/admin"
	"github.com/wowd/wowd/internal/redact"
	"github.com/wowd/wowd/internal/tlsconf"
)

// statusOptions are the flags of wowd status.
type statusOptions struct {
	admin      string
	tokenFile  string
	asJSON     bool
	watch      bool
	every      time.Duration
	count      int
	top        int
	stuckAfter time.Duration
	timeout    time.Duration
	caFile     string // CAs that sign the listener's certificate (https), besides the system's
	certFile   string // client certificate, for a listener with tls.client-ca-file
	keyFile    string // its key
	shown      string // the status URL as errors show it: the user's part redacted, wowd's not
}

func (a *app) statusCmd() *cobra.Command {
	o := statusOptions{}
	cmd := &cobra.Command{
		Use:   "status [--admin URL] [--json] [--watch]",
		Short: "Show a running wowd's receivers, partitions and hot aggregates, and whether it is healthy",
		Long: `Read GET /admin/v1/status of a running wowd (wow.admin.listen) and show it as
a table: each receiver's membership and pause reason, each partition's
committed offset, end, lag, messages in flight and why it is paused, and the
hot and oldest aggregates by ID. --json prints the status as the API returns
it; --watch shows it again every --interval, and a status it cannot read
as a line on stderr with the time.

Exit code 0 when healthy; 1 when a partition has made no progress, or has been
paused (for another reason than a full window), for --stuck-after or longer,
when a receiver is not in its group once wowd has run for --stuck-after (a
start joins its groups meanwhile; /readyz answers 503 until it did), or when
the status cannot be read; 2 on a usage error. With --watch, the code of the
last status shown.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return configError(fmt.Errorf("unexpected argument %q: wowd status takes flags only", args[0]))
			}
			return nil
		},
		RunE: func(*cobra.Command, []string) error { return a.status(o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.admin, "admin", envOr(a.env, "WOWD_ADMIN", "http://127.0.0.1:9466"), "base URL of the admin listener (env WOWD_ADMIN)")
	f.StringVar(&o.tokenFile, "token-file", envOr(a.env, "WOWD_ADMIN_TOKEN_FILE", ""), "file holding the admin bearer token, when wow.admin.token-file is set (env WOWD_ADMIN_TOKEN_FILE)")
	f.BoolVar(&o.asJSON, "json", false, "print the status as JSON")
	f.BoolVar(&o.watch, "watch", false, "show the status again every --interval until interrupted")
	f.DurationVar(&o.every, "interval", 2*time.Second, "time between two statuses with --watch")
	f.IntVar(&o.count, "count", 0, "with --watch, stop after this many statuses (0: until interrupted)")
	f.IntVar(&o.top, "top", 10, "hot and oldest aggregates to show (0 to 100)")
	f.DurationVar(&o.stuckAfter, "stuck-after", 5*time.Minute, "a partition without progress, or paused, this long is unhealthy")
	f.DurationVar(&o.timeout, "timeout", 10*time.Second, "time limit of one status request")
	f.StringVar(&o.caFile, "ca-file", envOr(a.env, "WOWD_ADMIN_CA_FILE", ""), "PEM file of the CAs that sign an https listener's certificate, besides the system's (env WOWD_ADMIN_CA_FILE)")
	f.StringVar(&o.certFile, "cert-file", envOr(a.env, "WOWD_ADMIN_CERT_FILE", ""), "PEM client certificate, for a listener with tls.client-ca-file (env WOWD_ADMIN_CERT_FILE)")
	f.StringVar(&o.keyFile, "key-file", envOr(a.env, "WOWD_ADMIN_KEY_FILE", ""), "PEM key of --cert-file (env WOWD_ADMIN_KEY_FILE)")
	return cmd
}

// envOr returns the value of name in env, else def.
func envOr(env []string, name, def string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok && v != "" {
			return v
		}
	}
	return def
}

// errUnhealthy is returned when the status shows problems: exit code 1,
// with the problems already printed.
var errUnhealthy = errors.New("unhealthy")

func (a *app) status(o statusOptions) error {
	switch {
	case o.top < 0 || o.top > admin.MaxTop:
		return configError(fmt.Errorf("--top %d: want 0 to %d", o.top, admin.MaxTop))
	case o.watch && o.every <= 0:
		return configError(fmt.Errorf("--interval %s: want more than 0", o.every))
	case o.stuckAfter <= 0:
		return configError(fmt.Errorf("--stuck-after %s: want more than 0", o.stuckAfter))
	case o.timeout <= 0:
		// http.Client takes 0 and below as no limit: a listener that
		// accepts and never answers would hold the probe for good.
		return configError(fmt.Errorf("--timeout %s: want more than 0", o.timeout))
	case o.count < 0:
		return configError(fmt.Errorf("--count %d: want 0 (until interrupted) or more", o.count))
	}
	base, err := url.Parse(strings.TrimSuffix(o.admin, "/"))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return configError(fmt.Errorf("--admin %q: want an http:// or https:// URL of the admin listener", o.admin))
	}
	var token string
	if o.tokenFile != "" {
		b, err := os.ReadFile(o.tokenFile)
		if err != nil {
			return configError(fmt.Errorf("--token-file: %w", err))
		}
		token = strings.TrimSpace(string(b))
	}
	// The page's own URL (…/admin) names the same listener.
	base.Path = strings.TrimSuffix(base.Path, "/admin")
	target := base.JoinPath("/admin/v1/status")
	target.RawQuery = "top=" + strconv.Itoa(o.top)
	o.shown = strings.TrimSuffix(redact.URL(base.String()), "/") + "/admin/v1/status?" + target.RawQuery
	tc, err := o.tlsConfig()
	if err != nil {
		return configError(err)
	}
	client := &http.Client{Timeout: o.timeout}
	if tc != nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = tc
		client.Transport = tr
	}
	defer client.CloseIdleConnections()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var last error // the code of the last status shown
	for n := 1; ; n++ {
		err := a.statusOnce(ctx, client, target, token, o)
		if n > 1 && ctx.Err() != nil && errors.Is(err, context.Canceled) {
			// Interrupted while reading the next: --watch ends with the
			// code of the last status shown, not as a failure to read.
			return last
		}
		if !o.watch || (o.count > 0 && n >= o.count) {
			return err
		}
		last = err
		if err != nil && !errors.Is(err, errUnhealthy) {
			// Shown now, not only as the exit code: the screen would keep
			// the last status read, perhaps a healthy one, while wowd
			// cannot be reached.
			fmt.Fprintf(a.stderr, "== %s wowd: %s\n", time.Now().Format(time.TimeOnly), termLines(err.Error()))
		}
		t := time.NewTimer(o.every)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// statusOnce reads and shows one status.
func (a *app) statusOnce(ctx context.Context, client *http.Client, target *url.URL, token string, o statusOptions) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target.String(), nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		// Go's *url.Error shows the URL with the user name of --admin
		// (often a token, http://TOKEN@host): name the redacted one.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("reading the status: GET %s: %w", termSafe(o.shown), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("reading the status: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		// The admin API answers {"error": …}; another server (a wrong
		// --admin) answers what it does: its first line names it.
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) != nil || e.Error == "" {
			e.Error, _, _ = strings.Cut(strings.TrimSpace(string(body)), "\n")
		}
		msg := fmt.Sprintf("reading the status: GET %s: %s", termSafe(o.shown), termSafe(resp.Status))
		if e.Error != "" {
			msg += ": " + termSafe(oneLine(e.Error, 200))
		}
		return errors.New(msg)
	}
	var st admin.Status
	if err := json.Unmarshal(body, &st); err != nil {
		return fmt.Errorf("reading the status: %w", err)
	}
	if o.asJSON {
		_, err = a.stdout.Write(body)
	} else {
		if o.watch {
			fmt.Fprintf(a.stdout, "\n== %s\n", time.Now().Format(time.TimeOnly))
		}
		err = writeStatus(a.stdout, st)
	}
	if err != nil {
		return err
	}
	if problems := st.Problems(o.stuckAfter); len(problems) > 0 {
		for i, p := range problems {
			problems[i] = termSafe(p) // they name topics
		}
		if !o.asJSON {
			fmt.Fprintln(a.stdout, "\nUNHEALTHY")
			for _, p := range problems {
				fmt.Fprintln(a.stdout, "  "+p)
			}
		}
		return &exitError{code: ExitFailure, err: fmt.Errorf("%w: %s", errUnhealthy, strings.Join(problems, "; "))}
	}
	return nil
}

// writeStatus prints st as tables.
func writeStatus(w io.Writer, st admin.Status) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%s on %s, version %s, up %s; workers %d busy of %d, %d mailboxes (%d queued)\n",
		termSafe(st.Service), termSafe(st.Instance), termSafe(st.Version), short(st.UptimeSeconds), st.Executor.Busy, st.Executor.Workers,
		st.Executor.Mailboxes, st.Executor.QueuedMailboxes)
	for _, r := range st.Receivers {
		member := "not a member"
		if r.Joined {
			member = fmt.Sprintf("generation %d", r.Generation)
		}
		fmt.Fprintf(tw, "\n%s/%s\tgroup %s, %s, in flight %d/%d, paused: %s\n", termSafe(r.Dispatcher), termSafe(r.Context), termSafe(r.GroupID),
			member, r.InFlight, r.MaxInFlight, termSafe(r.Paused))
		fmt.Fprintln(tw, "PARTITION\tCOMMITTED\tEND\tLAG\tIN FLIGHT\tSPAN\tPAUSED\tSTALLED")
		for _, p := range r.Partitions {
			paused := termSafe(p.Paused)
			if paused != admin.PauseNone {
				paused += " " + short(p.PausedSeconds)
			}
			fmt.Fprintf(tw, "%s/%d\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", termSafe(p.Topic), p.Partition, dash(p.Committed),
				dash(p.HighWatermark), dash(p.Lag), p.InFlight, p.Span, paused, short(p.StalledSeconds))
		}
	}
	if len(st.Hot) > 0 {
		fmt.Fprintln(tw, "\nHOT\tAGGREGATE\tID\tUNFINISHED")
		for _, h := range st.Hot {
			fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%d\n", termSafe(h.Dispatcher), termSafe(h.Context), termSafe(h.Aggregate), shownID(h.ID, h.IDBytes), h.Unfinished)
		}
	}
	if len(st.Oldest) > 0 {
		fmt.Fprintln(tw, "\nOLDEST\tAGGREGATE\tID\tAT\tAGE")
		for _, o := range st.Oldest {
			fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s/%d@%d\t%s\n", termSafe(o.Dispatcher), termSafe(o.Context), termSafe(o.Aggregate), shownID(o.ID, o.IDBytes),
				termSafe(o.Topic), o.Partition, o.Offset, short(o.AgeSeconds))
		}
	}
	if st.Parked.Available && len(st.Parked.Aggregates) > 0 {
		fmt.Fprintln(tw, "\nPARKED\tAGGREGATE\tID\tAT\tFOR\tWHY")
		for _, p := range st.Parked.Aggregates {
			why := p.Reason
			if p.HeadPastFailure {
				why = "head past the failed message: " + why // as the page and wowd parked list say
			}
			fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s/%d@%d\t%s\t%s: %s\n", termSafe(p.Dispatcher), termSafe(p.Context), termSafe(p.Aggregate), shownID(p.ID, p.IDBytes),
				termSafe(p.Topic), p.Partition, p.Offset, short(time.Since(p.Since).Seconds()), termSafe(p.Class), termSafe(why))
		}
	}
	return tw.Flush()
}

// shownID is how the tables show an aggregate ID of the status: from its
// bytes (id_bytes) where it is not UTF-8, which the JSON's id has lost,
// and like every ID, quoted with Go escapes unless plain (termSafe):
// "cart-\xff", the form wowd parked --aggregate takes.
func shownID(id string, raw []byte) string {
	if raw != nil {
		id = string(raw)
	}
	return termSafe(id)
}

// short formats seconds like 850ms, 42s, 3m5s; 0 as "-".
func short(sec float64) string {
	if sec <= 0 {
		return "-"
	}
	d := time.Duration(sec * float64(time.Second))
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	default:
		return d.Round(time.Minute).String()
	}
}

// dash shows -1 (unknown) as "-".
func dash(n int64) string {
	if n < 0 {
		return "-"
	}
	return strconv.FormatInt(n, 10)
}

// tlsConfig is the TLS configuration --ca-file, --cert-file and --key-file
// ask for; nil without them (the system's CAs, no client certificate).
func (o statusOptions) tlsConfig() (*tls.Config, error) {
	if o.caFile == "" && o.certFile == "" && o.keyFile == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	var errs []error
	if o.caFile != "" {
		system, _ := x509.SystemCertPool() // nil where there is none: the file's CAs alone
		pool, err := tlsconf.CertPool(o.caFile, system)
		if err != nil {
			errs = append(errs, fmt.Errorf("--ca-file: %w", err))
		}
		tc.RootCAs = pool
	}
	switch {
	case (o.certFile == "") != (o.keyFile == ""):
		errs = append(errs, errors.New("--cert-file and --key-file go together: give both or neither"))
	case o.certFile != "":
		cert, err := tls.LoadX509KeyPair(o.certFile, o.keyFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("--cert-file and --key-file: %w", err))
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, errors.Join(errs...)
}
