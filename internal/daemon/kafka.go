package daemon

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"github.com/twmb/franz-go/plugin/kprom"
	"github.com/twmb/franz-go/plugin/kzap"
	"go.uber.org/zap"

	"github.com/wowd/wowd/internal/config"
	"github.com/wowd/wowd/internal/tlsconf"
)

// ClientOptions turns wow.kafka into franz-go options for a client named
// clientID. reg, when not nil, receives the client's metrics (kprom, labelled
// by client ID).
func ClientOptions(k config.Kafka, clientID string, log *zap.Logger, reg *prometheus.Registry) ([]kgo.Opt, error) {
	start := kgo.NewOffset().AtStart()
	if k.StartOffset == "latest" {
		start = kgo.NewOffset().AtEnd()
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(k.BootstrapServers...),
		kgo.ClientID(clientID),
		kgo.FetchMaxBytes(k.FetchMaxBytes),
		kgo.FetchMaxPartitionBytes(k.FetchMaxPartitionBytes),
		kgo.FetchMaxWait(k.FetchMaxWait),
		kgo.SessionTimeout(k.SessionTimeout),
		kgo.RebalanceTimeout(k.RebalanceTimeout),
		kgo.HeartbeatInterval(k.HeartbeatInterval),
		// Explicit: franz-go's defaults changed across versions, and a new
		// group must never silently start at the end.
		kgo.ConsumeStartOffset(start),
		kgo.ConsumeResetOffset(start),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
	}
	if k.GroupProtocol == "consumer" {
		opts = append(opts, kgo.ServerSideBalancer())
	}
	if log != nil {
		// The client's info lines (every group transition) are noise next to
		// wowd's own rebalance logs; they show at debug. Asked at every
		// line: a reload of wow.log.level changes the logger's level.
		core := log.Core()
		level := func() kgo.LogLevel {
			if core.Enabled(zap.DebugLevel) {
				return kgo.LogLevelInfo
			}
			return kgo.LogLevelWarn
		}
		opts = append(opts, kgo.WithLogger(kzap.New(log.Named("kafka").With(zap.String("client", clientID)), kzap.LevelFn(level))))
	}
	if reg != nil {
		opts = append(opts, kgo.WithHooks(kprom.NewMetrics("wowd_kafka",
			kprom.Registerer(reg), kprom.Gatherer(reg), kprom.WithClientLabel())))
	}
	if k.TLS.Enabled {
		tc, err := tlsConfig(k.TLS)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if k.SASL.Mechanism != "" {
		m, err := saslMechanism(k.SASL)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// saslMechanism returns the SASL mechanism of s. Credentials from files
// are read now, so that a missing file stops the start, and again at each
// authentication, so that a rotated password or refreshed token is used on
// the next connection or re-authentication.
func saslMechanism(s config.SASL) (sasl.Mechanism, error) {
	password := func() (string, error) { return s.Password, nil }
	if s.PasswordFile != "" {
		password = func() (string, error) { return readSecretFile(s.PasswordFile) }
		if _, err := password(); err != nil {
			return nil, &ConfigError{Path: "wow.kafka.sasl.password-file", Err: err}
		}
	}
	scramAuth := func(context.Context) (scram.Auth, error) {
		pass, err := password()
		return scram.Auth{User: s.Username, Pass: pass}, err
	}
	switch s.Mechanism {
	case "plain":
		return plain.Plain(func(context.Context) (plain.Auth, error) {
			pass, err := password()
			return plain.Auth{User: s.Username, Pass: pass}, err
		}), nil
	case "scram-sha-256":
		return scram.Sha256(scramAuth), nil
	case "scram-sha-512":
		return scram.Sha512(scramAuth), nil
	case "oauthbearer":
		if _, err := readSecretFile(s.TokenFile); err != nil {
			return nil, &ConfigError{Path: "wow.kafka.sasl.token-file", Err: err}
		}
		return oauth.Oauth(func(context.Context) (oauth.Auth, error) {
			tok, err := readSecretFile(s.TokenFile)
			return oauth.Auth{Token: tok}, err
		}), nil
	}
	return nil, &ConfigError{Path: "wow.kafka.sasl.mechanism", Err: fmt.Errorf("unsupported %q", s.Mechanism)}
}

// maxSecretFile bounds a file holding a credential (an OAuth token may be
// a few kilobytes).
const maxSecretFile = 64 << 10

// readSecretFile reads a credential from the file at path, trimmed of the
// white space around it. Its errors never quote the file's content.
func readSecretFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	switch {
	case err != nil:
		return "", fmt.Errorf("reading %s: %w", path, err)
	case len(b) > maxSecretFile:
		return "", fmt.Errorf("%s is larger than %d bytes", path, maxSecretFile)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return v, nil
}

// tlsConfig builds the TLS of the Kafka clients from wow.kafka.tls. Files
// that cannot be used are configuration errors naming their key.
func tlsConfig(t config.TLS) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // opt-in, documented
	if t.CAFile != "" {
		pool, err := tlsconf.CertPool(t.CAFile, nil)
		if err != nil {
			return nil, &ConfigError{Path: "wow.kafka.tls.ca-file", Err: err}
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, &ConfigError{Path: "wow.kafka.tls.cert-file", Err: fmt.Errorf("%s with wow.kafka.tls.key-file %s: %w", t.CertFile, t.KeyFile, err)}
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
