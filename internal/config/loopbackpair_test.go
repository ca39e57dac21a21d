package config_test

import (
	"net"
	"testing"

	"github.com/wowd/wowd/internal/config"
)

// Found by review: b10fc9b refused two listeners "on one address", counting localhost and
// any loopback address as one host. wowd binds each listener with
// net.Listen("tcp", addr), and Go listens on localhost at one address (the
// first IPv4 one it resolves to, 127.0.0.1 here): 127.0.0.2 is another
// address, and both listeners bind the same port side by side. The file
// below ran before the change and is now refused by config validate and
// wowd run (exit 2) although nothing would fail to bind.
func TestLocalhostAndAnotherLoopbackAddressDoNotCollide(t *testing.T) {
	// The two listeners, bound as wowd binds them, on one port.
	metrics, err := net.Listen("tcp", "localhost:0")
	if err != nil {
		t.Fatal(err)
	}
	defer metrics.Close()
	_, port, _ := net.SplitHostPort(metrics.Addr().String())
	admin, err := net.Listen("tcp", "127.0.0.2:"+port)
	if err != nil {
		t.Skipf("127.0.0.2 cannot bind here: %v", err)
	}
	defer admin.Close()
	t.Logf("bound side by side: %s and %s", metrics.Addr(), admin.Addr())

	y := "wow:\n  service: s\n  kafka:\n    bootstrap-servers: [k:9092]\n  contexts:\n    c:\n      aggregates: [a]\n" +
		"  dispatchers:\n    d:\n      topics: [event]\n      handler: {type: log}\n" +
		"  metrics:\n    listen: localhost:" + port + "\n" +
		"  admin:\n    listen: 127.0.0.2:" + port + "\n"
	if _, err := config.Parse([]byte(y), "test.yaml", testRegistry(), nil); err != nil {
		t.Fatalf("listeners that bind side by side (localhost:%s, 127.0.0.2:%s) refused as one address:\n%v", port, port, err)
	}
}
