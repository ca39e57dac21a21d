package handlers

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/wowd/wowd/handler"
	"github.com/wowd/wowd/internal/handlerconfig"
)

// headers refuses exactly the connection headers Go's HTTP/2 transport
// refuses before sending a request (read as no response, every message
// would be retried for good), and takes the others, which worked before
// and still do: Connection: close is a real setting over HTTP/1.1.
func TestConnectionHeadersAreRefusedAsHTTP2RefusesThem(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	spec, _ := handler.Default().Lookup("http")
	for _, tc := range []struct {
		name, value string
		refused     bool
	}{
		{"Connection", "close", false},
		{"Connection", "keep-alive", false},
		{"Keep-Alive", "timeout=5", false},
		{"Proxy-Connection", "keep-alive", false},
		{"TE", "trailers", false},
		{"Connection", "Upgrade", true},
		{"Upgrade", "websocket", true},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
		req.Header.Set(tc.name, tc.value)
		resp, err := srv.Client().Do(req)
		if err == nil {
			if resp.ProtoMajor != 2 {
				t.Fatalf("setup: %s, want HTTP/2", resp.Proto)
			}
			resp.Body.Close()
		}
		if (err != nil) != tc.refused {
			t.Fatalf("setup: HTTP/2 request with %s: %s: %v, want refused %v", tc.name, tc.value, err, tc.refused)
		}
		_, err = handlerconfig.Decode(spec, map[string]any{"url": "http://x", "headers": map[string]any{tc.name: tc.value}})
		if (err != nil) != tc.refused {
			t.Errorf("headers: {%s: %s}: %v, want refused %v", tc.name, tc.value, err, tc.refused)
		}
	}
}
