// Package loopback tells whether an HTTP request is addressed to, or comes
// from, this machine: what the listeners that need no token (the admin API,
// a sidecar's ingest) check, so that a web page open on the machine cannot
// reach them through a DNS name rebound to 127.0.0.1.
package loopback

import (
	"net"
	"strings"
)

// Host reports whether a Host header (a name or address, with or without
// a port) names this machine: localhost, or a loopback address.
func Host(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Remote reports whether a request's remote address (host:port) is on this
// machine.
func Remote(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
