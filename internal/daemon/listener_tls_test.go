package daemon

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/config"
	"github.com/wowd/wowd/internal/tlsconf/tlstest"
)

// httpsClient is a client of a server of f, presenting cert when not nil.
func httpsClient(f tlstest.Files, cert *tls.Certificate) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: f.ClientConfig(cert)}}
}

// TestIngestMutualTLS: with wow.ingest.tls.client-ca-file and no token,
// the ingest listener takes writes only from clients with a certificate of
// the client CA; a plain HTTP request, a client without a certificate and
// one with a certificate of another CA publish nothing (the topic is read
// back empty). The metrics listener serves HTTPS with its own certificate,
// and a renewed one without a restart.
func TestIngestMutualTLS(t *testing.T) {
	const topic = "wow.example.cart.event"
	c := newCluster(t, kfake.SeedTopics(2, topic))
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	clientCA := tlstest.NewCA(t, "producers")
	ingestTLS := tlstest.WriteServer(t, t.TempDir(), "ingest", clientCA)
	metricsTLS := tlstest.WriteServer(t, t.TempDir(), "metrics", nil)
	cnt := &counter{n: map[string]int{}}
	var reg handler.Registry
	reg.Register(cnt.spec())
	cfg, err := config.Parse(fmt.Appendf(nil, `
wow:
  service: carts
  kafka:
    bootstrap-servers: [%s]
    commit-interval: 100ms
    heartbeat-interval: 200ms
  contexts:
    example-service:
      alias: example
      aggregates: [cart]
  dispatchers:
    projection:
      topics: [event]
      handler: {type: count}
  metrics:
    listen: 127.0.0.1:0
    tls: {cert-file: %q, key-file: %q}
  ingest:
    enabled: true
    listen: 127.0.0.1:0
    tls: {cert-file: %q, key-file: %q, client-ca-file: %q}
`, c.ListenAddrs()[0], metricsTLS.CertFile, metricsTLS.KeyFile, ingestTLS.CertFile, ingestTLS.KeyFile, ingestTLS.ClientCAFile),
		"test.yaml", &reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := New(cfg, &reg, zaptest.NewLogger(t), "test")
	if err != nil {
		t.Fatal(err)
	}
	rt.Start(context.Background())
	defer stopRT(t, rt)
	url := "https://" + rt.IngestAddr() + "/v1/messages/event"

	send := func(cl *http.Client, scheme, id string) (int, error) {
		resp, err := cl.Post(strings.Replace(url, "https", scheme, 1), "application/json", bytes.NewReader(event(id, "cart-"+id, "")))
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	good := clientCA.Client(t, "producer")
	stranger := tlstest.NewCA(t, "strangers").Client(t, "stranger")

	if code, err := send(&http.Client{Timeout: 10 * time.Second}, "http", "plain"); err == nil && code < 400 {
		t.Errorf("plain HTTP to the TLS ingest listener answered %d", code)
	}
	if code, err := send(httpsClient(ingestTLS, nil), "https", "no-cert"); err == nil {
		t.Errorf("a client without a certificate was answered %d", code)
	}
	if code, err := send(httpsClient(ingestTLS, &stranger), "https", "stranger"); err == nil {
		t.Errorf("a client with another CA's certificate was answered %d", code)
	}
	if n := endOffsets(t, adm, topic); n != 0 {
		t.Fatalf("unauthenticated writes were refused, yet %s holds %d records", topic, n)
	}
	for _, id := range []string{"plain", "no-cert", "stranger"} {
		if cnt.get(id) != 0 {
			t.Errorf("%s: refused, yet handled", id)
		}
	}

	code, err := send(httpsClient(ingestTLS, &good), "https", "good")
	if err != nil || code != http.StatusAccepted {
		t.Fatalf("a client of the client CA: %d, %v; want 202", code, err)
	}
	if n := endOffsets(t, adm, topic); n != 1 {
		t.Errorf("after one accepted write %s holds %d records", topic, n)
	}

	// The metrics listener: HTTPS with its own certificate, no client
	// certificate asked.
	resp, err := httpsClient(metricsTLS, nil).Get("https://" + rt.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics over TLS: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("wowd_ingest_requests_total")) {
		t.Errorf("GET /metrics over TLS: %d, %d bytes", resp.StatusCode, len(body))
	}
	if resp.TLS == nil || resp.TLS.PeerCertificates[0].Subject.CommonName != "metrics" {
		t.Errorf("the metrics listener did not present its certificate: %+v", resp.TLS)
	}

	// A renewed certificate is served on new connections, without a restart.
	metricsTLS.Rotate(t, "metrics-renewed")
	fresh := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: metricsTLS.ClientConfig(nil), DisableKeepAlives: true}}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := fresh.Get("https://" + rt.MetricsAddr() + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.TLS.PeerCertificates[0].Subject.CommonName == "metrics-renewed" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the renewed certificate was not served within 10s (last error %v)", err)
		}
	}
}
