package devbroker

import (
	"net"
	"testing"
)

// The broker listens on the loopback address configured, where wowd's
// clients connect: kfake alone listens on 127.0.0.1 whatever the host, so a
// bootstrap address of [::1] or 127.0.0.2 was accepted and then unreachable.
func TestStartListensOnTheConfiguredHost(t *testing.T) {
	for _, addr := range []string{"127.0.0.2:0", "[::1]:0", "127.0.0.1:0"} {
		if l, err := net.Listen("tcp", addr); err != nil {
			t.Logf("%s: this machine cannot listen there (%v): not tested", addr, err)
			continue
		} else {
			l.Close()
		}
		b, err := Start(addr, 1, []string{"wow.example.cart.event"})
		if err != nil {
			t.Errorf("Start(%q): %v", addr, err)
			continue
		}
		listening := b.Addr()
		b.Close()
		got, _, _ := net.SplitHostPort(listening)
		want, _, _ := net.SplitHostPort(addr)
		if !net.ParseIP(got).Equal(net.ParseIP(want)) {
			t.Errorf("Start(%q) listens on %s", addr, listening)
		}
	}
}
