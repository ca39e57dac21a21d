package daemon

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	zapobs "go.uber.org/zap/zaptest/observer"

	"github.com/wowd/wowd/internal/config"
)

// kafkaClientLogger builds a Kafka client from ClientOptions over a logger whose
// level is level (as `wowd run` builds it: an AtomicLevel a reload of
// wow.log.level sets) and returns the kgo.Logger it got.
func kafkaClientLogger(t *testing.T, log *zap.Logger) kgo.Logger {
	t.Helper()
	k := config.Default().Kafka
	k.BootstrapServers = []string{"127.0.0.1:1"}
	opts, err := ClientOptions(k, "wowd-d-c", log, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	kl, _ := cl.OptValue(kgo.WithLogger).(kgo.Logger)
	if kl == nil {
		t.Fatal("no kgo logger")
	}
	return kl
}

// TestLogLevelReloadReachesKafkaClients (found by review): wow.log.level is
// documented as applied by a reload, and ClientOptions says the Kafka
// client's info lines (every group transition) "show at debug". But the
// client's level is fixed from the logger's level when the client is
// built (kzap.Level, a static level): a reload from info to debug never
// shows them (the operator who turns debug on to watch a rebalance sees
// nothing of the client), and a reload from debug back to info keeps
// logging them, at info, for good.
func TestLogLevelReloadReachesKafkaClients(t *testing.T) {
	t.Run("info then debug", func(t *testing.T) {
		level := zap.NewAtomicLevelAt(zapcore.InfoLevel)
		core, _ := zapobs.New(level)
		kl := kafkaClientLogger(t, zap.New(core))
		level.SetLevel(zapcore.DebugLevel) // what a reload of wow.log.level: debug does
		if got := kl.Level(); got < kgo.LogLevelInfo {
			t.Errorf("after a reload to debug the Kafka client logs at %v: its info lines (group transitions) do not show at debug", got)
		}
	})
	t.Run("debug then info", func(t *testing.T) {
		level := zap.NewAtomicLevelAt(zapcore.DebugLevel)
		core, logs := zapobs.New(level)
		kl := kafkaClientLogger(t, zap.New(core))
		level.SetLevel(zapcore.InfoLevel) // what a reload of wow.log.level: info does
		logs.TakeAll()
		// As kgo logs a group transition.
		if kl.Level() >= kgo.LogLevelInfo {
			kl.Log(kgo.LogLevelInfo, "assigning partitions", "group", "g")
		}
		if n := logs.FilterMessage("assigning partitions").Len(); n > 0 {
			t.Errorf("after a reload back to info, the Kafka client's info lines are still logged (%d), at level info (client level %v)", n, kl.Level())
		}
	})
}
