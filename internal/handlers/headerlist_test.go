package handlers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/wowd/wowd/handler"
)

// A message whose headers exceed what an HTTP/2 server advertises it takes
// (SETTINGS_MAX_HEADER_LIST_SIZE) is refused by Go's transport before it
// is sent, with no response. Read as no response it was retried for good
// and stalled its aggregate; over HTTP/1.1 the same server answers 431,
// which dead-letters it. Over HTTP/2 it now fails for good too, like the
// 431, and nothing reaches the server.
func TestHeadersBeyondTheServersListSizeFailForGood(t *testing.T) {
	for _, h2c := range []bool{false, true} {
		name := "http1.1"
		if h2c {
			name = "h2c"
		}
		t.Run(name, func(t *testing.T) {
			var n atomic.Int32
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { n.Add(1) }))
			srv.Config.MaxHeaderBytes = 8 << 10
			if h2c {
				srv.Config.Protocols = new(http.Protocols)
				srv.Config.Protocols.SetUnencryptedHTTP2(true)
			}
			srv.Start()
			t.Cleanup(srv.Close)
			h := build(t, "http", sinkConfig(srv.URL, map[string]any{"h2c": h2c, "max-attempts": 3}), handler.Deps{})
			acks := newAcks(t)
			small := testMessage(1)
			h.Handle(context.Background(), small, acks.ack(1))
			if err := acks.wait(t, 1); err != nil {
				t.Fatalf("a message with few headers: %v", err)
			}
			big := testMessage(2)
			for i := range 5 {
				big.Headers = append(big.Headers, handler.Header{Key: "h" + string(rune('a'+i)), Value: []byte(strings.Repeat("v", 4000))})
			}
			h.Handle(context.Background(), big, acks.ack(2))
			err := acks.wait(t, 2)
			wantClass(t, err, handler.Permanent)
			if strings.Contains(err.Error(), "giving up") {
				t.Errorf("retried: %v", err)
			}
			if h2c {
				if got := n.Load(); got != 1 {
					t.Errorf("%d requests reached the server, want 1 (the small message's)", got)
				}
				if !strings.Contains(err.Error(), "header") {
					t.Errorf("error %q does not say the headers are too large", err)
				}
			}
		})
	}
}
