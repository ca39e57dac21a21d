package wow

// blockMasksGeneric is blockMasks a byte at a time: the version for
// architectures without an assembly one, and the reference the assembly is
// tested against.
func blockMasksGeneric(d []byte, m []blockMask) {
	for k := range m {
		var b blockMask
		for j, c := range d[k*64 : k*64+64] {
			bit := uint64(1) << j
			if c >= 0x80 {
				b.highs |= bit
			}
			switch c {
			case '"':
				b.quotes |= bit
			case '{', '[':
				b.opens |= bit
			case '}', ']':
				b.closes |= bit
			case '\\':
				b.escapes |= bit
			}
		}
		m[k] = b
	}
}
