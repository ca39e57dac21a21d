//go:build !amd64 || purego

package wow

func blockMasks(d []byte, m []blockMask) {
	blockMasksGeneric(d, m)
}
