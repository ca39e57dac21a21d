package loopback

import "testing"

func TestHost(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1": true, "127.0.0.1:9464": true, "127.1.2.3": true, "[::1]:9466": true, "::1": true,
		"localhost": true, "LocalHost:80": true,
		"": false, "wowd": false, "localhost.evil.example": false, "10.0.0.1:9464": false,
		"[::ffff:10.0.0.1]:1": false, "evil.example:9464": false,
	} {
		if got := Host(host); got != want {
			t.Errorf("Host(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestRemote(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:51234": true, "[::1]:51234": true,
		"10.0.0.1:51234": false, "127.0.0.1": false, "localhost:1": false, "": false,
	} {
		if got := Remote(addr); got != want {
			t.Errorf("Remote(%q) = %v, want %v", addr, got, want)
		}
	}
}
