package handlers

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/wowd/wowd/handler"
)

// HTTPConfig configures the http sink.
type HTTPConfig struct {
	URL             string            `config:"url" required:"true" desc:"Absolute http or https URL each message is POSTed to; requests go through the proxy that HTTPS_PROXY or HTTP_PROXY names, unless NO_PROXY exempts the host, the host is localhost or a loopback address, or h2c is set."`
	RequestTimeout  time.Duration     `config:"request-timeout" reload:"true" desc:"Time limit of one request, reading the response included; less than the dispatcher's handler.timeout."`
	MaxAttempts     int               `config:"max-attempts" desc:"Attempts per message, the first included, before a transient failure is reported; 0 retries transient failures forever."`
	BackoffInitial  time.Duration     `config:"backoff-initial" desc:"Wait before the first retry; it doubles with each retry, with jitter."`
	BackoffMax      time.Duration     `config:"backoff-max" desc:"Longest wait between retries (a Retry-After response header may ask for up to 5m)."`
	MaxConcurrency  int               `config:"max-concurrency" reload:"true" desc:"Requests this sink has in flight at most, retries included; 0 sets no limit of its own: the window bounds them (wow.dispatch.max-in-flight per receiver, one request per message)."`
	RateLimit       float64           `config:"rate-limit" reload:"true" desc:"Requests per second this sink sends at most, retries included; 0 means no limit."`
	RateBurst       int               `config:"rate-burst" reload:"true" desc:"Requests that may go at once after a quiet period, when rate-limit is set."`
	Headers         map[string]string `config:"headers" secret:"true" desc:"Static headers added to every request (not Host, Content-Length, Transfer-Encoding, Upgrade, Connection but close or keep-alive, traceparent, tracestate, or names with the ce-, kafka-, wow- and wowd- prefixes)."`
	HeadersFromEnv  map[string]string `config:"headers-from-env" desc:"Headers whose values are read from environment variables at start, by header name (Authorization: WOWD_SINK_TOKEN); values are trimmed."`
	HeadersFromFile map[string]string `config:"headers-from-file" reload:"true" desc:"Headers whose values are read from files, by header name (Authorization: /run/secrets/token); values are trimmed and read again when the file changes; a file that cannot be used keeps the previous value and is read again every second until it can."`
	ContentType     string            `config:"content-type" desc:"Content-Type of a request whose record has no content-type header."`
	H2C             bool              `config:"h2c" desc:"Speak HTTP/2 without TLS (h2c, prior knowledge) to an http URL, whose server must accept it; otherwise http URLs get HTTP/1.1 (https URLs get HTTP/2 when the server offers it)."`
	TLS             HTTPTLSConfig     `config:"tls"`
	Batch           HTTPBatchConfig   `config:"batch"`
}

// HTTPTLSConfig configures the TLS connections of the http sink (an https
// URL).
type HTTPTLSConfig struct {
	CAFile             string `config:"ca-file" desc:"PEM file of the CAs to trust instead of the system's."`
	CertFile           string `config:"cert-file" desc:"PEM client certificate for mutual TLS (with key-file)."`
	KeyFile            string `config:"key-file" desc:"PEM private key of the client certificate (with cert-file)."`
	InsecureSkipVerify bool   `config:"insecure-skip-verify" desc:"Do not verify the server's certificate (testing only)."`
}

func defaultHTTPConfig() *HTTPConfig {
	return &HTTPConfig{
		RequestTimeout: 10 * time.Second,
		MaxAttempts:    5,
		BackoffInitial: 200 * time.Millisecond,
		BackoffMax:     30 * time.Second,
		MaxConcurrency: 0, // the window's
		RateBurst:      1,
		ContentType:    "application/json",
		Batch:          HTTPBatchConfig{MaxBytes: 1 << 20, Linger: 5 * time.Millisecond}, // off: max-messages 0
	}
}

// Limits of rate-limit and rate-burst, which keep the limiter's arithmetic
// in range.
const (
	minRateLimit = 0.001 // one request per 1000s
	maxRateBurst = 1_000_000
)

// FitTry reports whether a request fits in a try of the dispatcher's
// handler.timeout: wowd config validate checks it, and the sink refuses
// to start otherwise.
func (c *HTTPConfig) FitTry(tryTimeout time.Duration) error {
	if tryTimeout > 0 && c.RequestTimeout >= tryTimeout {
		return fmt.Errorf("request-timeout: %v must be less than the dispatcher's handler.timeout (%v), or every slow request times out the message's try", c.RequestTimeout, tryTimeout)
	}
	return c.Batch.fitTry(c.RequestTimeout, tryTimeout)
}

// FitRunning is FitTry for c read again for a reload of a sink built from
// running, with the handler.timeout it runs with: the batch keys take a
// restart, so the running sink goes on batching with running's, and the
// new request-timeout must fit with those (a new linger of the file, not
// in force, neither makes room for it nor takes any). running of another
// type than c (a handler retyped, which takes a restart) leaves c's own.
func (c *HTTPConfig) FitRunning(running any, tryTimeout time.Duration) error {
	fit := *c
	if r, ok := running.(*HTTPConfig); ok && r != nil {
		fit.Batch = r.Batch
	}
	return fit.FitTry(tryTimeout)
}

// Validate checks the configuration, reporting every problem. It reads no
// environment variable and no file: that happens when the sink is built.
func (c *HTTPConfig) Validate() error {
	var errs []error
	if err := checkURL(c.URL); err != nil {
		errs = append(errs, fmt.Errorf("url: %w", err))
	}
	if c.RequestTimeout <= 0 {
		errs = append(errs, errors.New("request-timeout: must be positive"))
	}
	if c.MaxAttempts < 0 {
		errs = append(errs, errors.New("max-attempts: must not be negative (0 retries forever)"))
	}
	if c.BackoffInitial <= 0 {
		errs = append(errs, errors.New("backoff-initial: must be positive"))
	}
	if c.BackoffMax < c.BackoffInitial {
		errs = append(errs, errors.New("backoff-max: must not be less than backoff-initial"))
	}
	if c.MaxConcurrency < 0 {
		errs = append(errs, errors.New("max-concurrency: must not be negative (0 sets no limit of the sink's own)"))
	}
	if r := c.RateLimit; math.IsNaN(r) || math.IsInf(r, 0) || r < 0 || (r > 0 && r < minRateLimit) {
		errs = append(errs, fmt.Errorf("rate-limit: must be 0 (no limit) or at least %g requests per second", minRateLimit))
	}
	if c.RateBurst < 1 || c.RateBurst > maxRateBurst {
		errs = append(errs, fmt.Errorf("rate-burst: must be between 1 and %d", maxRateBurst))
	}
	errs = append(errs, c.checkHeaders()...)
	if c.ContentType == "" || !validHeaderValue(c.ContentType) {
		errs = append(errs, errors.New("content-type: must be a non-empty header value"))
	}
	errs = append(errs, c.TLS.check(c.URL)...)
	errs = append(errs, c.Batch.check()...)
	if u, err := url.Parse(c.URL); err == nil && u.Scheme == "https" && c.H2C {
		errs = append(errs, errors.New("h2c: set, but url is https: HTTP/2 is negotiated over TLS"))
	}
	return errors.Join(errs...)
}

// checkHeaders checks headers, headers-from-env and headers-from-file: valid
// names, none reserved, none set twice.
func (c *HTTPConfig) checkHeaders() []error {
	var errs []error
	seen := map[string]string{} // canonical header name -> the key that set it
	for _, src := range []struct {
		key string
		m   map[string]string
		// check checks the value of header k
		check func(k, v string) error
	}{
		{"headers", c.Headers, func(k, v string) error {
			if err := checkStaticHeader(k, v); err != nil {
				return err
			}
			if strings.TrimSpace(v) == "" {
				return errors.New("value is empty") // as a variable's or a file's (headerValue)
			}
			return nil
		}},
		{"headers-from-env", c.HeadersFromEnv, func(k, v string) error {
			if err := checkStaticHeader(k, ""); err != nil {
				return err
			}
			if v == "" || strings.ContainsAny(v, "=\x00") {
				return errors.New("want the name of an environment variable")
			}
			return nil
		}},
		{"headers-from-file", c.HeadersFromFile, func(k, v string) error {
			if err := checkStaticHeader(k, ""); err != nil {
				return err
			}
			if v == "" {
				return errors.New("want a file path")
			}
			return nil
		}},
	} {
		for _, k := range slices.Sorted(maps.Keys(src.m)) {
			key := src.key + "." + k
			if err := src.check(k, src.m[k]); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", key, err))
				continue
			}
			canon := http.CanonicalHeaderKey(k)
			if prev, dup := seen[canon]; dup {
				errs = append(errs, fmt.Errorf("%s: header also set by %s", key, prev))
				continue
			}
			seen[canon] = key
		}
	}
	return errs
}

// check checks the TLS settings of a sink posting to rawURL.
func (t HTTPTLSConfig) check(rawURL string) []error {
	var errs []error
	if t.CertFile != "" && t.KeyFile == "" {
		errs = append(errs, errors.New("tls.key-file: required with tls.cert-file"))
	}
	if t.KeyFile != "" && t.CertFile == "" {
		errs = append(errs, errors.New("tls.cert-file: required with tls.key-file"))
	}
	if u, err := url.Parse(rawURL); err == nil && u.Scheme == "http" && t != (HTTPTLSConfig{}) {
		errs = append(errs, errors.New("tls: set, but url is http, not https"))
	}
	return errs
}

func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the URL, credentials included
		}
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("scheme %q: want http or https", u.Scheme)
	}
	if u.Host == "" {
		return errors.New("no host")
	}
	return nil
}

func checkStaticHeader(k, v string) error {
	lk := strings.ToLower(k)
	switch {
	case !validHeaderName(k):
		return errors.New("not a valid header name")
	case !validHeaderValue(v):
		return errors.New("value holds control characters")
	case lk == "content-type":
		return errors.New("set content-type instead")
	case lk == "host" || lk == "content-length" || lk == "transfer-encoding":
		return errors.New("set by the HTTP client")
	case lk == "upgrade" || lk == "connection" && !strings.EqualFold(strings.TrimSpace(v), "close") && !strings.EqualFold(strings.TrimSpace(v), "keep-alive"):
		// HTTP/2 (h2c, or an https endpoint offering it) refuses a request
		// with these before sending it, an error read as no response, so
		// every message was retried. (Connection: close or keep-alive, and
		// the other connection headers, it leaves out or passes.)
		return errors.New("a connection's own header, which HTTP/2 refuses (Connection may be close or keep-alive)")
	case strings.HasPrefix(lk, "ce-") || strings.HasPrefix(lk, "kafka-") || strings.HasPrefix(lk, "wowd-") || strings.HasPrefix(lk, "wow-"):
		return errors.New("the ce-, kafka-, wow- and wowd- prefixes are reserved")
	case lk == "traceparent" || lk == "tracestate":
		return errors.New("set from the message's trace context")
	}
	return nil
}

func httpSpec() handler.Spec {
	return handler.Spec{
		Name:    "http",
		Summary: "POSTs each message to a URL as a CloudEvent in binary mode, or batches of them in structured mode, retrying transient failures.",
		Config:  func() any { return defaultHTTPConfig() },
		New: func(cfg any, deps handler.Deps) (handler.Handler, error) {
			c, ok := cfg.(*HTTPConfig)
			if !ok {
				return nil, fmt.Errorf("http: config is %T, want *HTTPConfig", cfg)
			}
			if err := c.Validate(); err != nil {
				return nil, err
			}
			s, err := newHTTPSink(*c, deps)
			if err != nil {
				return nil, err
			}
			return s, nil
		},
	}
}
