package ingest

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/wowd/wowd/internal/bearer"
	"github.com/wowd/wowd/internal/metrics"
)

func request(auth string) *http.Request {
	req := httptest.NewRequest(http.MethodPost, Path+"event", strings.NewReader("{}"))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	return req
}

// TestUnauthorizedTouchesNothing: a request without the token is answered
// 401 with WWW-Authenticate, counted, and reaches neither a receiver nor
// the producer (both nil here: touching them would panic).
func TestUnauthorizedTouchesNothing(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("t0ken"), 0o600); err != nil {
		t.Fatal(err)
	}
	tok, err := bearer.Open(file, "ingest", nil)
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New("test")
	in := &Ingest{Token: tok, Metrics: m.Ingest(), Log: zap.NewNop(), Receivers: []Receiver{nil}}
	for _, auth := range []string{"", "Bearer wrong"} {
		w := httptest.NewRecorder()
		in.ServeHTTP(w, request(auth))
		if w.Code != http.StatusUnauthorized || !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%q: %d %v", auth, w.Code, w.Header())
		}
	}
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == "wowd_ingest_requests_total" {
			for _, s := range mf.Metric {
				if s.Label[0].GetValue() == "unauthorized" {
					n = s.GetCounter().GetValue()
				}
			}
		}
	}
	if n != 2 {
		t.Errorf("unauthorized counted %v times, want 2", n)
	}
}
