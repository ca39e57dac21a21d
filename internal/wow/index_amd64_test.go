//go:build !purego

package wow

import (
	"fmt"
	"os"
	"regexp"
	"strings"
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
// turned off in turn: without the one-pass AVX-512 index (the one-pass
// AVX2 index on AVX-512 masks), then with AVX2 (one pass), then with AVX2
// masks and fill, then with SSE2 only, which otherwise do not run where
// AVX-512 does.
func TestIndexWithoutAVX512(t *testing.T) {
	avx512, index512, avx2, index2 := hasAVX512, hasIndexAVX512, hasAVX2, hasIndexAVX2
	t.Cleanup(func() { hasAVX512, hasIndexAVX512, hasAVX2, hasIndexAVX2 = avx512, index512, avx2, index2 })
	for _, turnOff := range []*bool{&hasIndexAVX512, &hasAVX512, &hasIndexAVX2, &hasAVX2} {
		*turnOff = false
		t.Run(fmt.Sprintf("avx512=%v,index512=%v,avx2=%v,index2=%v", hasAVX512, hasIndexAVX512, hasAVX2, hasIndexAVX2), func(t *testing.T) {
			TestIndex(t)
			TestRouteFixtures(t)
			TestRouteEscapesAtEveryLength(t)
			TestRouteIndexesARepeatedHeaderOnce(t)
		})
	}
}

// TestBlockIndexAVX2 is TestBlockIndex on blockIndexAVX2, which
// TestBlockIndex does not reach where AVX-512 is.
func TestBlockIndexAVX2(t *testing.T) {
	if !hasIndexAVX2 {
		t.Skip("no AVX2 and PCLMULQDQ")
	}
	index512 := hasIndexAVX512
	t.Cleanup(func() { hasIndexAVX512 = index512 })
	hasIndexAVX512 = false
	TestBlockIndex(t)
}

// TestVectorCodeIsVEXOnly holds the AVX2 and AVX-512 versions in
// index_amd64.s to VEX and EVEX encodings: an instruction there that names
// an X, Y or Z register must be one of the V… forms. A legacy SSE
// instruction (MOVQ AX, X8, say) among AVX code makes the processor merge
// or save the vector registers' upper halves: on an Intel Xeon with AVX-512
// turned off it made the whole scan 3.6 times slower (1,280 against 350 ns
// a message in BenchmarkRoute). The SSE2 version is legacy SSE throughout,
// as it must be for processors without AVX.
func TestVectorCodeIsVEXOnly(t *testing.T) {
	src, err := os.ReadFile("index_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	vector := regexp.MustCompile(`\b[XYZ]([0-9]|[12][0-9]|3[01])\b`)
	fn, checked := "", 0
	for i, line := range strings.Split(string(src), "\n") {
		code, _, _ := strings.Cut(line, "//")
		code = strings.TrimSpace(code)
		if name, ok := strings.CutPrefix(code, "TEXT "); ok {
			fn = name
			continue
		}
		if !strings.Contains(fn, "AVX") || code == "" || strings.HasSuffix(code, ":") || strings.HasPrefix(code, "#") {
			continue
		}
		op, args, _ := strings.Cut(code, " ")
		if !vector.MatchString(args) {
			continue
		}
		checked++
		if !strings.HasPrefix(op, "V") {
			t.Errorf("index_amd64.s:%d, in %s: %q is a legacy SSE instruction on a vector register; use its VEX form", i+1, fn, code)
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d instructions of the AVX versions; index_amd64.s not read as expected", checked)
	}
}
