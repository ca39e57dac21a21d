package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wowd/wowd/internal/config"
)

// TestSASLPasswordFile: a client of wow.kafka.sasl.password-file
// authenticates with the file's password (PLAIN and SCRAM against kfake),
// reads the file again at each authentication (a wrong password fixed in
// the file lets the next connection in, with no new client), and a missing
// file stops the start, naming the key.
func TestSASLPasswordFile(t *testing.T) {
	for _, mech := range []string{"plain", "scram-sha-256", "scram-sha-512"} {
		t.Run(mech, func(t *testing.T) {
			const user, pass = "wowd", "pw-7e1b9c0a"
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(),
				kfake.Superuser(strings.ToUpper(mech), user, pass), kfake.SeedTopics(1, "t"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			file := filepath.Join(t.TempDir(), "password")
			if err := os.WriteFile(file, []byte("not-the-password\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			k := config.Default().Kafka
			k.BootstrapServers = c.ListenAddrs()
			k.SASL = config.SASL{Mechanism: mech, Username: user, PasswordFile: file}
			opts, err := ClientOptions(k, "test", nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			cl, err := kgo.NewClient(append(opts, kgo.RetryTimeout(time.Second))...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			adm := kadm.NewClient(cl)
			list := func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, err := adm.ListTopics(ctx)
				return err
			}
			if err := list(); err == nil {
				t.Fatal("authenticated with a wrong password")
			}
			if err := os.WriteFile(file, []byte(pass+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := list(); err != nil {
				t.Fatalf("the password fixed in the file was not used: %v", err)
			}

			k.SASL.PasswordFile = filepath.Join(t.TempDir(), "missing")
			_, err = ClientOptions(k, "test", nil, nil)
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Path != "wow.kafka.sasl.password-file" {
				t.Errorf("a missing password file: %v, want a ConfigError on wow.kafka.sasl.password-file", err)
			}
		})
	}
}

// TestOAuthBearerTokenFile: kfake has no OAUTHBEARER, so this checks the
// mechanism itself: its first message carries the token in the file, read
// again at each authentication; an empty or missing file is refused
// without showing its content.
func TestOAuthBearerTokenFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte("eyJ.first-token.sig\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := saslMechanism(config.SASL{Mechanism: "oauthbearer", TokenFile: file})
	if err != nil {
		t.Fatal(err)
	}
	if m.Name() != "OAUTHBEARER" {
		t.Fatalf("mechanism %s", m.Name())
	}
	first := func() string {
		t.Helper()
		_, msg, err := m.Authenticate(context.Background(), "127.0.0.1:9092")
		if err != nil {
			t.Fatal(err)
		}
		return string(msg)
	}
	if msg := first(); !strings.Contains(msg, "auth=Bearer eyJ.first-token.sig\x01") {
		t.Errorf("first message %q lacks the token", msg)
	}
	if err := os.WriteFile(file, []byte("eyJ.refreshed.sig"), 0o600); err != nil {
		t.Fatal(err)
	}
	if msg := first(); !strings.Contains(msg, "auth=Bearer eyJ.refreshed.sig\x01") {
		t.Errorf("after the refresh, first message %q lacks the new token", msg)
	}
	if err := os.WriteFile(file, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Authenticate(context.Background(), "127.0.0.1:9092"); err == nil {
		t.Error("authenticated with an empty token file")
	}

	for _, bad := range []string{filepath.Join(dir, "missing"), file} { // file is empty now
		_, err := saslMechanism(config.SASL{Mechanism: "oauthbearer", TokenFile: bad})
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Path != "wow.kafka.sasl.token-file" {
			t.Errorf("%s: %v, want a ConfigError on wow.kafka.sasl.token-file", filepath.Base(bad), err)
		}
	}
}

// TestKafkaTLSFilesAreConfigErrors: a wow.kafka.tls file that cannot be
// read or holds no PEM is a configuration error (exit 2) naming its key,
// not a runtime failure.
func TestKafkaTLSFilesAreConfigErrors(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	for _, tt := range []struct {
		name string
		tls  config.TLS
		key  string
	}{
		{"missing CA", config.TLS{Enabled: true, CAFile: missing}, "wow.kafka.tls.ca-file"},
		{"CA not PEM", config.TLS{Enabled: true, CAFile: notPEM}, "wow.kafka.tls.ca-file"},
		{"missing certificate", config.TLS{Enabled: true, CertFile: missing, KeyFile: notPEM}, "wow.kafka.tls.cert-file"},
		{"certificate not PEM", config.TLS{Enabled: true, CertFile: notPEM, KeyFile: notPEM}, "wow.kafka.tls.cert-file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			k := config.Default().Kafka
			k.BootstrapServers = []string{"127.0.0.1:1"}
			k.TLS = tt.tls
			_, err := ClientOptions(k, "test", nil, nil)
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Path != tt.key {
				t.Errorf("%v (%T), want a ConfigError on %s", err, err, tt.key)
			}
		})
	}
}
