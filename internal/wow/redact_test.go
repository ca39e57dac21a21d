package wow

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// TestLoadMetadataErrorHidesURLPassword: an error reading metadata from a
// URL with a password names the URL without the password.
func TestLoadMetadataErrorHidesURLPassword(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: the request fails
	_, err = LoadMetadata(context.Background(), "http://wow:pw-meta-93c1@"+addr+"/wow/metadata", 5*time.Second)
	if err == nil {
		t.Fatal("read metadata from a closed port")
	}
	if strings.Contains(err.Error(), "pw-meta-93c1") || !strings.Contains(err.Error(), "wow:xxxxx@"+addr) {
		t.Errorf("error %q: want the URL with its password replaced", err)
	}
}
