package cli

import (
	"bytes"
	"testing"

	"github.com/wowd/wowd/handler"
)

// A Kafka setting the client refuses (fetch-max-wait under 10ms) is a
// configuration error for every command, exit 2: `config validate` passed
// it ("> 0"), and `wowd run` and `wowd rewind` exited 1, a runtime
// failure, with the client's error, which names no key. Found by review.
func TestAKafkaSettingTheClientRefusesIsAConfigurationError(t *testing.T) {
	path := writeConfig(t, `wow:
  service: s
  kafka:
    bootstrap-servers: [127.0.0.1:1]
    fetch-max-wait: 5ms
  metrics:
    listen: ""
  contexts:
    shop:
      aggregates: [cart]
  dispatchers:
    d:
      topics: [event]
      handler: {type: log}
`)
	for _, args := range [][]string{
		{"config", "validate", "--config", path},
		{"run", "--config", path},
		{"rewind", "--config", path, "--dispatcher", "d", "--to", "earliest", "--timeout", "2s"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr, nil, handler.Default())
		if code != ExitConfig {
			t.Errorf("wowd %v: exit %d, want %d (a configuration error naming wow.kafka.fetch-max-wait)\nstdout: %s\nstderr: %s",
				args[:2], code, ExitConfig, stdout.String(), stderr.String())
		}
	}
}
