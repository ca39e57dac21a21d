package wow

import "math/bits"

// index is the structural index of a value, built a window of blocks at a
// time as a Route's scan moves forward: for each 64-byte block, a bit per
// byte for the quotes that delimit strings (a quote after an unescaped
// backslash does not), for the brackets outside strings, for backslashes
// and for bytes that are not ASCII. Whether a byte is inside a string is
// the parity of the delimiting quotes before it, so the scan finds a
// string's end or a container's end from the masks instead of testing the
// bytes one token at a time, and whether a string is ASCII, which spares
// validating its UTF-8. On a valid JSON value its answers are those of
// reading it a byte at a time (the tests hold it to such a reading).
type index struct {
	d     []byte
	base  int    // the first block of the window
	n     int    // blocks in the window
	carry uint64 // all ones when the byte after the window is inside a string
	// escaped: the first byte after the window is escaped (the window ends
	// in an odd run of backslashes).
	escaped uint64
	m       [indexWindow]blockMask
	// backslashes: the value has a backslash in a window indexed so far.
	backslashes bool
	indexed     int // blocks indexed, windows indexed again included
}

// blockMask is the index of one 64-byte block: bit j is byte j.
type blockMask struct {
	quotes  uint64 // '"'; after fill, only those that delimit strings
	opens   uint64 // '{' and '['; after fill, only outside strings
	closes  uint64 // '}' and ']'; after fill, only outside strings
	highs   uint64 // bytes that are not ASCII
	escapes uint64 // '\\'
}

// indexWindow is the number of blocks indexed at once: 1 KiB of value, so
// that a routing message is indexed in one go and a large state in
// windows that stay in the cache.
const indexWindow = 16

// reset starts indexing d from its first block.
func (x *index) reset(d []byte) {
	x.d, x.base, x.n, x.carry, x.escaped, x.backslashes = d, 0, 0, 0, 0, false
	x.fill()
}

// advance indexes the window after the current one; it reports false at
// the end of the value.
func (x *index) advance() bool {
	x.base += x.n
	x.n = 0
	if x.base*64 >= len(x.d) {
		return false
	}
	x.fill()
	return true
}

// fill indexes the window that starts at block x.base.
func (x *index) fill() {
	from := x.base * 64
	if from >= len(x.d) {
		return
	}
	rest := x.d[from:]
	carry, escaped := x.carry, x.escaped
	n := min((len(rest)+63)/64, indexWindow)
	x.indexed += n
	done, ok := 0, false // blocks whose masks blockIndex completed
	if escaped == 0 {
		done, carry, ok = blockIndex(rest[:min(len(rest), n*64)], x.m[:n], carry)
	}
	if !ok {
		x.masks(rest, n)
	}
	for k := done; k < n; k++ {
		b := &x.m[k]
		if b.escapes|escaped != 0 {
			x.backslashes = true
			var esc uint64
			esc, escaped = escapedBytes(b.escapes, escaped)
			b.quotes &^= esc
		}
		in := prefixXor(b.quotes) ^ carry
		b.opens &^= in
		b.closes &^= in
		carry = uint64(int64(in) >> 63)
	}
	x.carry, x.escaped, x.n = carry, escaped, n
}

// masks sets the masks of the n blocks of the window that rest starts,
// with blockMasks.
func (x *index) masks(rest []byte, n int) {
	full := min(len(rest)/64, n)
	if full > 0 {
		blockMasks(rest[:full*64], x.m[:full])
	}
	if full < n {
		// The value's last, partial block.
		r := len(rest) - full*64
		if len(x.d) >= 64 {
			// The masks of the value's last 64 bytes, shifted so that
			// the block starts at bit 0, and zeros after its end.
			b := &x.m[full]
			blockMasks(x.d[len(x.d)-64:], x.m[full:full+1])
			sh := uint(64 - r)
			b.quotes >>= sh
			b.opens >>= sh
			b.closes >>= sh
			b.highs >>= sh
			b.escapes >>= sh
		} else {
			// A value shorter than a block, padded with spaces.
			t := spaces
			copy(t[:], rest[full*64:])
			blockMasks(t[:], x.m[full:full+1])
		}
	}
}

// escapedBytes returns the bytes of a block that a backslash escapes, given
// its backslashes and whether its first byte is escaped by the block
// before (bit 0 of in), and whether the block's last backslash escapes the
// next block's first byte. An escaped backslash escapes nothing.
func escapedBytes(backslashes, in uint64) (esc, out uint64) {
	esc = in
	for b := backslashes &^ in; b != 0; {
		t := bits.TrailingZeros64(b)
		if t == 63 {
			return esc, 1
		}
		esc |= 1 << (t + 1)
		b &^= 3 << t // this one, and the next if it is a backslash
	}
	return esc, 0
}

// spaces pads a value's last block; a space is none of what the index
// marks.
var spaces = [64]byte{
	' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ',
	' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ',
	' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ',
	' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ',
}

// prefixXor sets each bit to the parity of the bits at and below it: with
// m the delimiting quotes of a block, the bytes from an opening quote up
// to (not including) its closing quote.
func prefixXor(m uint64) uint64 {
	m ^= m << 1
	m ^= m << 2
	m ^= m << 4
	m ^= m << 8
	m ^= m << 16
	m ^= m << 32
	return m
}

// block returns the masks of the block of i, indexing forward as needed,
// and false past the end of the value. Positions asked for only move
// forward in a scan; one before the window starts the index again.
func (x *index) block(i int) (*blockMask, bool) {
	for {
		k := i>>6 - x.base
		if k < 0 {
			x.reset(x.d)
			continue
		}
		if k < x.n {
			return &x.m[k], true
		}
		if !x.advance() {
			return nil, false
		}
	}
}

// stringEnd returns the position of the quote that ends the string whose
// contents start at i, or len(d).
func (x *index) stringEnd(i int) int {
	if end, ok := x.nearQuote(i); ok {
		return end
	}
	return x.stringEndFar(i)
}

// nearQuote is stringEnd's common case, small enough to be inlined: the
// end of the string is in the block of i, in the window. The callers on the
// scan's path call stringEndFar themselves when it reports false (a
// function that calls another is too costly for the compiler to inline).
func (x *index) nearQuote(i int) (int, bool) {
	if k := uint(i>>6 - x.base); k < uint(x.n) {
		if m := x.m[k%indexWindow].quotes >> uint(i&63); m != 0 {
			return i + bits.TrailingZeros64(m), true
		}
	}
	return 0, false
}

// stringEndFar is stringEnd past the block of i.
func (x *index) stringEndFar(i int) int {
	for ; i < len(x.d); i = (i | 63) + 1 {
		var b *blockMask
		if k := uint(i>>6 - x.base); k < uint(x.n) {
			b = &x.m[k%indexWindow] // x.block's common case
		} else {
			var ok bool
			if b, ok = x.block(i); !ok {
				break
			}
		}
		if m := b.quotes >> (i & 63); m != 0 {
			return i + bits.TrailingZeros64(m)
		}
	}
	return len(x.d)
}

// ascii reports whether d[i:j] is known to be ASCII; false when it is not
// or when it is not in the window.
func (x *index) ascii(i, j int) bool {
	for i < j {
		k := i>>6 - x.base
		if uint(k) >= uint(x.n) {
			return false
		}
		m := x.m[k].highs >> (i & 63)
		if n := (i | 63) + 1 - i; j-i < n {
			m &= 1<<(j-i) - 1
		}
		if m != 0 {
			return false
		}
		i = (i | 63) + 1
	}
	return true
}

// skipContainer returns the position after the object or array that
// starts at i, following only the nesting of brackets outside strings, and
// false when it does not end.
func (x *index) skipContainer(i int) (int, bool) {
	depth := 1
	for i++; i < len(x.d); i = (i | 63) + 1 {
		b, ok := x.block(i)
		if !ok {
			break
		}
		sh := uint(i & 63)
		o, c := b.opens>>sh, b.closes>>sh
		if bits.OnesCount64(c) < depth {
			// The nesting cannot come back to the top within this block.
			depth += bits.OnesCount64(o) - bits.OnesCount64(c)
			continue
		}
		for m := o | c; m != 0; m &= m - 1 {
			t := bits.TrailingZeros64(m)
			if o>>t&1 != 0 {
				depth++
			} else if depth--; depth == 0 {
				return i + t + 1, true
			}
		}
	}
	return len(x.d), false
}

// quoteIter walks the delimiting quotes of a value in order, for a scan
// that reads its strings one after another: m holds the quotes of block
// blk from some position on (the bits below it cleared). When the scan's
// next string opens at the iterator's first quote, the string ends at its
// second: two bits cleared, where looking the end up from the string's
// position (nearQuote) puts a load, a shift and a count on the path from
// one string to the next.
type quoteIter struct {
	blk int
	m   uint64
}

// stringAt is stringEnd(p+1) for the string whose opening quote is at p,
// when q is at that quote and the closing quote is in the same block: the
// position of the closing quote and q after it. It reports false
// otherwise (and when q has passed the block's last quote), and the caller
// calls stringAtFar. It is small enough to be inlined.
func (x *index) stringAt(q quoteIter, p int) (int, quoteIter, bool) {
	// With m zero, blk*64+64 may be p, but m2 is zero too.
	if m := q.m; q.blk<<6+bits.TrailingZeros64(m) == p {
		if m2 := m & (m - 1); m2 != 0 {
			return q.blk<<6 + bits.TrailingZeros64(m2), quoteIter{q.blk, m2 & (m2 - 1)}, true
		}
	}
	return 0, q, false
}

// stringAtFar is stringAt for any string: the position of its closing
// quote (or len(d)) and an iterator after it.
func (x *index) stringAtFar(p int) (int, quoteIter) {
	q := x.quotesFrom(p + 1) // at the closing quote, when the window has it
	if q.m == 0 {
		end := x.stringEnd(p + 1)
		return end, x.quotesFrom(end + 1)
	}
	end := q.blk<<6 + bits.TrailingZeros64(q.m)
	if q.m &= q.m - 1; q.m == 0 {
		q = x.quotesFrom(end + 1)
	}
	return end, q
}

// quotesFrom returns an iterator at the first delimiting quote at or after
// i in the window (one with no quotes when there are none; a scan does not
// move the window for it).
func (x *index) quotesFrom(i int) quoteIter {
	k := i>>6 - x.base
	if k < 0 || k >= x.n {
		return quoteIter{}
	}
	m := x.m[k].quotes &^ (1<<(i&63) - 1)
	for m == 0 && k+1 < x.n {
		k++
		m = x.m[k].quotes
	}
	return quoteIter{x.base + k, m}
}
