//go:build !purego

package wow

import "golang.org/x/sys/cpu"

// blockMasks sets m[k] to the masks of block k of d (64 bytes each; len(d)
// is 64 times len(m)) as the block holds them, before fill clears what is
// inside strings or escaped. Implemented with AVX-512 (BW) where the
// processor has it, else with AVX2 where it has that, else with SSE2, which
// every amd64 has.
func blockMasks(d []byte, m []blockMask) {
	if hasAVX512 {
		blockMasksAVX512(d, m)
	} else if hasAVX2 {
		blockMasksAVX2(d, m)
	} else {
		blockMasksSSE2(d, m)
	}
}

// hasAVX2 and hasAVX512 are read once: whether blockMasks uses
// blockMasksAVX2 or blockMasksAVX512.
var (
	hasAVX2   = cpu.X86.HasAVX2
	hasAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW
	// hasIndexAVX512: whether blockIndex uses blockIndexAVX512.
	hasIndexAVX512 = hasAVX512 && cpu.X86.HasPCLMULQDQ
	// hasIndexAVX2: whether blockIndex uses blockIndexAVX2 (without
	// AVX-512).
	hasIndexAVX2 = hasAVX2 && cpu.X86.HasPCLMULQDQ
)

// blockIndex indexes d, of any length, into m (a block for each 64 bytes
// or fewer at the end), carry being fill's carry before d (with no escaped
// byte before it), when the processor can do it in one pass (AVX-512 or
// AVX2, with PCLMULQDQ): then it
// returns true, with the number of blocks whose masks it completed (fill's
// work) and the carry after them; the rest have their masks as blockMasks
// gives them, and a last, partial block its bytes' masks only.
func blockIndex(d []byte, m []blockMask, carry uint64) (int, uint64, bool) {
	if hasIndexAVX512 {
		done, out := blockIndexAVX512(d, m, carry)
		return done, out, true
	}
	if hasIndexAVX2 {
		if len(d) < 64 {
			// A value shorter than a block, padded with spaces: AVX2
			// reads the last block as the last 64 bytes of d.
			t := spaces
			copy(t[:], d)
			d = t[:]
		}
		done, out := blockIndexAVX2(d, m, carry)
		return done, out, true
	}
	return 0, carry, false
}

// blockIndexAVX512 is blockIndex with AVX-512 (F, BW) and PCLMULQDQ. A
// partial last block is read with a masked load, which does not fault on
// the bytes it leaves out.
//
//go:noescape
func blockIndexAVX512(d []byte, m []blockMask, carry uint64) (done int, out uint64)

// blockIndexAVX2 is blockIndex with AVX2 and PCLMULQDQ, for d of at least
// 64 bytes: a partial last block is read as the last 64 bytes of d and its
// masks shifted down.
//
//go:noescape
func blockIndexAVX2(d []byte, m []blockMask, carry uint64) (done int, out uint64)

// blockMasksSSE2 is blockMasks 16 bytes at a time.
//
//go:noescape
func blockMasksSSE2(d []byte, m []blockMask)

// blockMasksAVX2 is blockMasks 32 bytes at a time; the processor must
// have AVX2.
//
//go:noescape
func blockMasksAVX2(d []byte, m []blockMask)

// blockMasksAVX512 is blockMasks 64 bytes at a time; the processor must
// have AVX-512 F and BW.
//
//go:noescape
func blockMasksAVX512(d []byte, m []blockMask)
