package handlers

import (
	"context"
	"crypto/tls"
	"fmt"
	"math"
	"net"
	"net/http"

	"github.com/wowd/wowd/internal/tlsconf"
)

// newTransport returns the connection pool of a sink: keep-alive
// connections, every idle one kept until IdleConnTimeout, HTTP/2 when an
// https server offers it or, with h2c, over http, and the TLS settings of
// cfg.
//
// Idle connections are not capped: a sink talks to one origin, its
// requests in flight bound the connections it opens, and a cap below them
// (net/http's default is 2 per host) closes a connection each time a
// request ends while more are in flight, to dial another for the next.
//
// dial, when not nil, opens the connections (handler.Deps.Dial) to the
// sink's own address: the proxy the environment names is not applied on
// top of it, which would hand dial the proxy's address instead. Without
// dial, requests go through that proxy (HTTPS_PROXY, HTTP_PROXY, NO_PROXY),
// except with h2c.
func newTransport(cfg HTTPConfig, dial func(ctx context.Context, network, address string) (net.Conn, error)) (*http.Transport, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if dial != nil {
		tr.DialContext = dial
		tr.Proxy = nil
	}
	tr.ForceAttemptHTTP2 = true // also with a TLSClientConfig of our own
	tr.MaxIdleConns = 0         // no limit
	tr.MaxIdleConnsPerHost = math.MaxInt
	if cfg.H2C {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true) // alone: prior knowledge, no HTTP/1.1
		// An HTTP proxy would be sent the HTTP/2 preface, which it cannot
		// forward: h2c connects directly.
		tr.Proxy = nil
	}
	tc, err := cfg.TLS.config()
	if err != nil {
		return nil, err
	}
	if tc != nil {
		tr.TLSClientConfig = tc
	}
	return tr, nil
}

// config returns the TLS client configuration, or nil when t sets nothing.
// It reads the files t names.
func (t HTTPTLSConfig) config() (*tls.Config, error) {
	if t == (HTTPTLSConfig{}) {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // opt-in, documented
	if t.CAFile != "" {
		pool, err := tlsconf.CertPool(t.CAFile, nil)
		if err != nil {
			return nil, fmt.Errorf("tls.ca-file: %w", err)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls.cert-file, tls.key-file: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// maxRedirects bounds the redirects one attempt follows (HTTP.md: up to
// 10 hops, 11 requests with the first).
const maxRedirects = 10

// checkRedirect follows only redirects that keep the method and the body
// (307, 308) and stay on the origin (scheme and host) of the sink's URL:
// after a 301, 302 or 303 the client would send a GET without the message,
// and another origin must not get the sink's headers (tokens). Any other
// 3xx response is the outcome, a permanent failure, and so is one with a
// known ActionHeader: it decides, whatever the status.
func checkRedirect(req *http.Request, via []*http.Request) error {
	if req.Response == nil || len(via) > maxRedirects { // via: the requests made before req
		return http.ErrUseLastResponse
	}
	if _, ok := parseAction(req.Response.Header.Get(ActionHeader)); ok {
		return http.ErrUseLastResponse // the sink said what follows: that row comes first
	}
	switch req.Response.StatusCode {
	case http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
	default:
		return http.ErrUseLastResponse
	}
	if first := via[0].URL; req.URL.Scheme != first.Scheme || req.URL.Host != first.Host {
		return http.ErrUseLastResponse
	}
	return nil
}

// redirectGuard hands the client a redirect response whose Location cannot
// be parsed without that Location, so that the response itself is the
// outcome (an "other 3xx" of the response → action table) rather than the
// client's error, which the sink would take for no response at all.
type redirectGuard struct{ next http.RoundTripper }

func (g redirectGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := g.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		if loc := resp.Header.Get("Location"); loc != "" {
			if _, perr := req.URL.Parse(loc); perr != nil {
				resp.Header.Del("Location")
			}
		}
	}
	return resp, nil
}

// CloseIdleConnections closes the idle connections of the transport under
// g, as http.Client.CloseIdleConnections expects of its transport.
func (g redirectGuard) CloseIdleConnections() {
	if c, ok := g.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
