//go:build !amd64 || purego

package wow

// blockMaskVersions returns the versions of blockMasks this build has
// besides blockMasks itself: none.
func blockMaskVersions() map[string]func([]byte, []blockMask) {
	return map[string]func([]byte, []blockMask){}
}
