package wow

import (
	"math/rand/v2"
	"testing"
)

// indexAlphabet makes random values dense in what the index marks.
const indexAlphabet = "\"{}[]:, ab\x80\xff\\"

// randomValue returns n bytes, mostly from indexAlphabet.
func randomValue(rng *rand.Rand, n int) []byte {
	d := make([]byte, n)
	for i := range d {
		if rng.IntN(8) == 0 {
			d[i] = byte(rng.IntN(256))
		} else {
			d[i] = indexAlphabet[rng.IntN(len(indexAlphabet))]
		}
	}
	return d
}

// TestBlockMasks holds the architecture's blockMasks to the byte-at-a-time
// reference on random blocks, and each of the architecture's versions
// (blockMaskVersions) with it.
func TestBlockMasks(t *testing.T) {
	versions := blockMaskVersions()
	versions["blockMasks"] = blockMasks
	for name, f := range versions {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			for range 2000 {
				n := 1 + rng.IntN(8)
				d := randomValue(rng, n*64)
				var got, want [8]blockMask
				f(d, got[:n])
				blockMasksGeneric(d, want[:n])
				if got != want {
					t.Fatalf("%s(%q) = %x, want %x", name, d, got, want)
				}
			}
		})
	}
}

// indexReference reads d a byte at a time as the index does: a backslash
// escapes the byte after it, an unescaped quote opens or closes a string.
// It returns, for each byte, whether it is a quote that delimits a string
// and whether it is inside a string (from an opening quote up to, not
// including, its closing quote).
func indexReference(d []byte) (delim, in []bool) {
	delim, in = make([]bool, len(d)), make([]bool, len(d))
	inside, escaped := false, false
	for i, b := range d {
		switch {
		case escaped:
			escaped = false
		case b == '\\':
			escaped = true
		case b == '"':
			delim[i] = true
			inside = !inside
		}
		in[i] = inside || delim[i]
		if delim[i] && !inside {
			in[i] = false // a closing quote
		}
	}
	return delim, in
}

// checkIndex holds the index of d to indexReference: stringEnd at every
// position in order; the quote iterator's strings; skipContainer at every bracket outside a string (each
// from a fresh index, as a scan reaching it would have it); ascii against
// a test of each byte.
func checkIndex(t *testing.T, d []byte) {
	t.Helper()
	delim, in := indexReference(d)
	var x index
	x.reset(d)
	next := len(d)
	ends := make([]int, len(d)+1)
	ends[len(d)] = len(d)
	for i := len(d) - 1; i >= 0; i-- {
		if delim[i] {
			next = i
		}
		ends[i] = next
	}
	for i := 0; i <= len(d); i++ {
		if got := x.stringEnd(i); got != ends[i] {
			t.Fatalf("%q: stringEnd(%d) = %d, want %d", d, i, got, ends[i])
		}
	}
	// The quote iterator, as the scan uses it: each string from its
	// opening quote in order, every third left out (as the strings of a
	// skipped container are), so that the iterator falls behind and finds
	// its place again.
	var quotes []int
	for i, q := range delim {
		if q {
			quotes = append(quotes, i)
		}
	}
	x.reset(d)
	q := x.quotesFrom(0)
	for j := 0; 2*j < len(quotes); j++ {
		if j%3 == 2 {
			continue
		}
		p, want := quotes[2*j], len(d)
		if 2*j+1 < len(quotes) {
			want = quotes[2*j+1]
		}
		end, nq, ok := x.stringAt(q, p)
		if !ok {
			end, nq = x.stringAtFar(p)
		}
		if end != want {
			t.Fatalf("%q: the string at %d ends at %d by the quote iterator (fast: %v), want %d", d, p, end, ok, want)
		}
		q = nq
	}
	for i, b := range d {
		if in[i] || b != '{' && b != '[' {
			continue
		}
		want, depth := len(d), 0
		for j := i; j < len(d); j++ {
			if in[j] {
				continue
			}
			switch d[j] {
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
			if depth == 0 {
				want = j + 1
				break
			}
		}
		x.reset(d)
		got, ok := x.skipContainer(i)
		if got != want || ok != (want <= len(d) && depth == 0) {
			t.Fatalf("%q: skipContainer(%d) = %d, %v, want %d", d, i, got, ok, want)
		}
	}
	x.reset(d)
	for i := 0; i < len(d); i += 7 {
		for j := i; j <= len(d) && j < i+200; j += 13 {
			want := true
			for _, b := range d[i:j] {
				want = want && b < 0x80
			}
			inWindow := j <= (x.base+x.n)*64 // else "not known" is the answer
			if got := x.ascii(i, j); got && !want || !got && want && inWindow {
				t.Fatalf("%q: ascii(%d, %d) = %v, want %v", d, i, j, got, want)
			}
		}
	}
}

// TestIndex checks the index on random values of up to three windows, so
// that strings, escapes and containers cross blocks and windows, and on
// the test records.
func TestIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 60 {
		checkIndex(t, randomValue(rng, rng.IntN(3*indexWindow*64)))
	}
	for _, fx := range loadFixtures(t) {
		if v := fx.value(t); len(v) <= 16<<10 { // each bracket is skipped from the start
			checkIndex(t, v)
		}
	}
}

// TestEscapedBytes covers runs of backslashes within and across blocks.
func TestEscapedBytes(t *testing.T) {
	tests := []struct {
		backslashes, in, esc, out uint64
	}{
		{0, 0, 0, 0},
		{0, 1, 1, 0},
		{1, 0, 2, 0},             // \x
		{3, 0, 2, 0},             // \\ : the second is escaped, escapes nothing
		{7, 0, 2 | 8, 0},         // \\\x
		{1, 1, 1, 0},             // an escaped backslash at 0
		{3, 1, 1 | 4, 0},         // escaped, then \x
		{1 << 63, 0, 0, 1},       // the last byte escapes the next block's first
		{3 << 62, 0, 1 << 63, 0}, // \\ at the end: even
		{7 << 61, 0, 1 << 62, 1}, // \\\ at the end: odd
		{1<<63 | 1, 1, 1, 1},     // both ends
		{^uint64(0), 0, 0xaaaaaaaaaaaaaaaa, 0},
		{^uint64(0), 1, 0x5555555555555555, 1},
	}
	for _, tt := range tests {
		esc, out := escapedBytes(tt.backslashes, tt.in)
		if esc != tt.esc || out != tt.out {
			t.Errorf("escapedBytes(%#x, %d) = %#x, %d, want %#x, %d", tt.backslashes, tt.in, esc, out, tt.esc, tt.out)
		}
	}
}

// FuzzIndex is TestIndex on the fuzzer's values.
func FuzzIndex(f *testing.F) {
	f.Add([]byte(eventStream470))
	for _, seed := range routeSeeds {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, d []byte) {
		checkIndex(t, d)
	})
}

// TestBlockIndex holds blockIndex, where it indexes in one pass, to
// blockMasksGeneric (a last, partial block padded with zeros) and fill's
// rule for the blocks it completes (done): the bytes inside strings are the
// prefix XOR of the quotes XOR the carry, and brackets among them are
// cleared. It must complete each block before the first with a backslash,
// and no other. Values have backslashes in a few blocks only, so that whole
// windows are completed, and lengths that end blocks anywhere.
func TestBlockIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 5000 {
		d := randomValue(rng, 1+rng.IntN(indexWindow*64))
		for i, c := range d {
			if c == '\\' && rng.IntN(16) != 0 {
				d[i] = 'a'
			}
		}
		n := (len(d) + 63) / 64
		carry := uint64(0)
		if rng.IntN(2) == 0 {
			carry = ^uint64(0)
		}
		var got, want [indexWindow]blockMask
		done, out, ok := blockIndex(d, got[:n], carry)
		if !ok {
			t.Skip("blockIndex does not index in one pass on this processor")
		}
		padded := make([]byte, n*64)
		copy(padded, d)
		blockMasksGeneric(padded, want[:n])
		c, first := carry, n
		for k := range n {
			b := &want[k]
			if b.escapes != 0 {
				first = k
				break
			}
			in := prefixXor(b.quotes) ^ c
			b.opens &^= in
			b.closes &^= in
			c = uint64(int64(in) >> 63)
		}
		if done != first || got != want || out != c {
			t.Fatalf("%q (carry %x): blockIndex = %d, %x, %x; want %d, %x, %x", d, carry, done, out, got[:n], first, c, want[:n])
		}
	}
}
