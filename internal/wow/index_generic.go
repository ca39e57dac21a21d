//go:build !amd64 || purego

package wow

func blockMasks(d []byte, m []blockMask) {
	blockMasksGeneric(d, m)
}

// blockIndex does not index in one pass here (see the amd64 version).
func blockIndex(d []byte, m []blockMask, carry uint64) (int, uint64, bool) {
	return 0, carry, false
}
