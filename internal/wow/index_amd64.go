//go:build !purego

package wow

// blockMasks sets m[k] to the masks of block k of d (64 bytes each; len(d)
// is 64 times len(m)) as the block holds them, before fill clears what is
// inside strings or escaped. Implemented with SSE2, which every amd64 has.
//
//go:noescape
func blockMasks(d []byte, m []blockMask)
