package daemon

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"github.com/twmb/franz-go/plugin/kprom"
	"github.com/twmb/franz-go/plugin/kzap"
	"go.uber.org/zap"

	"github.com/wowd/wowd/internal/config"
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
		// wowd's own rebalance logs; they show at debug.
		level := kgo.LogLevelWarn
		if log.Core().Enabled(zap.DebugLevel) {
			level = kgo.LogLevelInfo
		}
		opts = append(opts, kgo.WithLogger(kzap.New(log.Named("kafka").With(zap.String("client", clientID)), kzap.Level(level))))
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
	switch k.SASL.Mechanism {
	case "":
	case "plain":
		opts = append(opts, kgo.SASL(plain.Auth{User: k.SASL.Username, Pass: k.SASL.Password}.AsMechanism()))
	case "scram-sha-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: k.SASL.Username, Pass: k.SASL.Password}.AsSha256Mechanism()))
	case "scram-sha-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: k.SASL.Username, Pass: k.SASL.Password}.AsSha512Mechanism()))
	default:
		return nil, fmt.Errorf("wow.kafka.sasl.mechanism: unsupported %q", k.SASL.Mechanism)
	}
	return opts, nil
}

func tlsConfig(t config.TLS) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // opt-in, documented
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("wow.kafka.tls.ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("wow.kafka.tls.ca-file: no PEM certificate found")
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("wow.kafka.tls.cert-file/key-file: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
