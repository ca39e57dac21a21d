//go:build !purego

package wow

import "golang.org/x/sys/cpu"

// blockMasks sets m[k] to the masks of block k of d (64 bytes each; len(d)
// is 64 times len(m)) as the block holds them, before fill clears what is
// inside strings or escaped. Implemented with AVX2 where the processor has
// it, else with SSE2, which every amd64 has.
func blockMasks(d []byte, m []blockMask) {
	if hasAVX2 {
		blockMasksAVX2(d, m)
	} else {
		blockMasksSSE2(d, m)
	}
}

// hasAVX2 is read once: whether blockMasks uses blockMasksAVX2.
var hasAVX2 = cpu.X86.HasAVX2

// blockMasksSSE2 is blockMasks 16 bytes at a time.
//
//go:noescape
func blockMasksSSE2(d []byte, m []blockMask)

// blockMasksAVX2 is blockMasks 32 bytes at a time; the processor must
// have AVX2.
//
//go:noescape
func blockMasksAVX2(d []byte, m []blockMask)
