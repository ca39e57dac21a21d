//go:build linux

package wow

import (
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
)

// TestIndexStaysInsideTheValue places values flush against unreadable
// pages, at the end of a readable page and at its start, for every length
// up to a page, and indexes and scans them: a read before the value's first
// byte or after its last (the vector loads of whole blocks, the last
// block's load of the value's last 64 bytes) faults and fails the test.
func TestIndexStaysInsideTheValue(t *testing.T) {
	page := syscall.Getpagesize()
	mem, err := syscall.Mmap(-1, 0, 3*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Skipf("mmap: %v", err)
	}
	defer syscall.Munmap(mem)
	if err := syscall.Mprotect(mem[:page], syscall.PROT_NONE); err != nil {
		t.Skipf("mprotect: %v", err)
	}
	if err := syscall.Mprotect(mem[2*page:], syscall.PROT_NONE); err != nil {
		t.Skipf("mprotect: %v", err)
	}
	readable := mem[page : 2*page : 2*page]
	rng := rand.New(rand.NewPCG(5, 6))
	var r Route
	head := `{"id":"i","contextName":"c","aggregateName":"a","aggregateId":"k\"","body":[{"name":"e"}],"pad":"`
	for n := 0; n <= page; n++ {
		values := [][]byte{randomValue(rng, n)} // then the message, when n holds one
		if pad := n - len(head) - 2; pad >= 0 {
			values = append(values, []byte(head+strings.Repeat("x", pad)+`"}`))
		}
		for k, v := range values {
			for _, at := range [][]byte{readable[page-n:], readable[:n:n]} {
				copy(at, v)
				var x index
				x.reset(at)
				for x.advance() {
				}
				if err := r.Scan(KindEvent, at, true); err != nil && k == 1 {
					t.Fatalf("Scan of the %d-byte message: %v", n, err)
				}
			}
		}
	}
}
