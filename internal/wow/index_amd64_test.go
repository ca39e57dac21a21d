//go:build !purego

package wow

import (
	"fmt"
	"testing"
)

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

// TestIndexWithoutAVX512 runs TestIndex, TestRouteFixtures and
// TestRouteEscapesAtEveryLength again with the processor's wider versions
// turned off in turn: without the one-pass AVX-512 index, then with AVX2,
// then with SSE2 only, which otherwise do not run where AVX-512 does.
func TestIndexWithoutAVX512(t *testing.T) {
	avx512, index512, avx2 := hasAVX512, hasIndexAVX512, hasAVX2
	t.Cleanup(func() { hasAVX512, hasIndexAVX512, hasAVX2 = avx512, index512, avx2 })
	for _, turnOff := range []*bool{&hasIndexAVX512, &hasAVX512, &hasAVX2} {
		*turnOff = false
		t.Run(fmt.Sprintf("avx512=%v,avx2=%v", hasAVX512, hasAVX2), func(t *testing.T) {
			TestIndex(t)
			TestRouteFixtures(t)
			TestRouteEscapesAtEveryLength(t)
		})
	}
}
