package deploy

import (
	"testing"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
)

// The Compose demo dead-letters its sink's 422s, as its README says ("so
// the dashboard's retry and dead-letter panels and the WowdDeadLetters
// alert have something to show"). With format wow and no on-failure it
// parked each aggregate instead, and with the demo producer's ten
// aggregate IDs every one was parked within minutes: the sink handled
// nothing more and WowdDeadLetters never fired. Found by review.
func TestComposeDemoDeadLetters(t *testing.T) {
	cfg, err := config.Load(path("deploy/compose/wowd.yaml"), handler.Default(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, d := range cfg.Dispatchers {
		if p := d.FailurePolicy(); p != config.OnFailureDeadLetter {
			t.Errorf("dispatcher %s of the Compose demo fails messages with on-failure %q; the README says its 422s are dead-lettered (set on-failure: dead-letter)", name, p)
		}
	}
}
