package config

import "testing"

func TestSameListenAddress(t *testing.T) {
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{"127.0.0.1:9464", "127.0.0.1:9464", true},
		{"127.0.0.1:9464", "127.0.0.1:9466", false},
		{":9464", "127.0.0.1:9464", true},
		{"0.0.0.0:9464", "10.0.0.5:9464", true},
		{"[::]:9464", "127.0.0.1:9464", true},
		{"localhost:9464", "127.0.0.1:9464", true},
		{"localhost:9464", "[::1]:9464", true},
		{"localhost:9464", "10.0.0.5:9464", false},
		{"10.0.0.5:9464", "10.0.0.6:9464", false},
		{"127.0.0.1:0", "127.0.0.1:0", false}, // each gets a port of its own
	} {
		if got := sameListenAddress(c.a, c.b); got != c.same {
			t.Errorf("sameListenAddress(%q, %q) = %v, want %v", c.a, c.b, got, c.same)
		}
	}
}
