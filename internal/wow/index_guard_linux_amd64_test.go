package wow

import (
	"fmt"
	"testing"
)

// TestIndexStaysInsideTheValueOnEveryPath is TestIndexStaysInsideTheValue
// on each vector path in turn, as TestIndexWithoutAVX512 turns them off:
// the processor's widest path alone reaches the guard pages otherwise, and
// the AVX2 path's load of a value's last 64 bytes, the SSE2 path and the
// generic masks each read differently.
func TestIndexStaysInsideTheValueOnEveryPath(t *testing.T) {
	avx512, index512, avx2, index2 := hasAVX512, hasIndexAVX512, hasAVX2, hasIndexAVX2
	t.Cleanup(func() { hasAVX512, hasIndexAVX512, hasAVX2, hasIndexAVX2 = avx512, index512, avx2, index2 })
	for _, turnOff := range []*bool{&hasIndexAVX512, &hasAVX512, &hasIndexAVX2, &hasAVX2} {
		*turnOff = false
		t.Run(fmt.Sprintf("avx512=%v,index512=%v,avx2=%v,index2=%v", hasAVX512, hasIndexAVX512, hasAVX2, hasIndexAVX2), func(t *testing.T) {
			TestIndexStaysInsideTheValue(t)
		})
	}
}
