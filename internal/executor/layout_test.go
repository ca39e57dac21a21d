package executor

import (
	"testing"
	"unsafe"
)

// The hot structures are laid out by cache line (see their comments); this
// keeps a field added in passing from spilling a line.
func TestLayout(t *testing.T) {
	var mb mailbox
	var sh shard
	var w worker
	checks := []struct {
		what      string
		got, want uintptr
	}{
		{"mailbox size", unsafe.Sizeof(mb), 128},
		{"mailbox.local offset", unsafe.Offsetof(mb.local), 64},
		{"shard size", unsafe.Sizeof(sh), 192},
		{"shard.free offset", unsafe.Offsetof(sh.free), 64},
		{"shard.emptied offset", unsafe.Offsetof(sh.emptied), 128},
		{"worker.inbox offset", unsafe.Offsetof(w.inbox), 64},
		{"worker.id offset", unsafe.Offsetof(w.id), 128},
		{"worker.rq offset", unsafe.Offsetof(w.rq), 320},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.what, c.got, c.want)
		}
	}
}
