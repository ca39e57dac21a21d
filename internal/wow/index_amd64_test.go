//go:build !purego

package wow

// blockMaskVersions returns the versions of blockMasks this processor can
// run, by name.
func blockMaskVersions() map[string]func([]byte, []blockMask) {
	v := map[string]func([]byte, []blockMask){"sse2": blockMasksSSE2}
	if hasAVX2 {
		v["avx2"] = blockMasksAVX2
	}
	if hasAVX512 {
		v["avx512"] = blockMasksAVX512
	}
	return v
}
