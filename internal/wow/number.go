package wow

import "math"

// parseInt returns the value of a JSON number (valid, as read by
// scanner.number) that must be an integer in the int64 range, in any of its
// JSON forms: 1755868563000, 1.755868563E12 and 17558685630000e-1 are the
// same integer. It returns why not otherwise. It is exact: no floating
// point is involved.
func parseInt(b []byte) (int64, string) {
	neg := b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) <= 18 && isDigits(b) { // the common case: fits without overflow checks
		var n int64
		for _, c := range b {
			n = n*10 + int64(c-'0')
		}
		if neg {
			n = -n
		}
		return n, ""
	}

	// Split into integer digits, fraction digits and exponent.
	intEnd := 0
	for intEnd < len(b) && isDigit(b[intEnd]) {
		intEnd++
	}
	fracStart, fracEnd := intEnd, intEnd
	if fracEnd < len(b) && b[fracEnd] == '.' {
		fracStart++
		fracEnd++
		for fracEnd < len(b) && isDigit(b[fracEnd]) {
			fracEnd++
		}
	}
	exp := 0
	if fracEnd < len(b) { // e or E
		i, expNeg := fracEnd+1, false
		switch b[i] {
		case '-':
			expNeg = true
			i++
		case '+':
			i++
		}
		// Beyond the number's own length (plus the 19 digits of an
		// int64) the answer no longer changes: trimming the digits' zeros
		// moves the exponent by less than that. A fixed cap could be
		// cancelled by a number with more digits than it.
		for limit := len(b) + 20; i < len(b); i++ {
			if exp < limit {
				exp = exp*10 + int(b[i]-'0')
			}
		}
		if expNeg {
			exp = -exp
		}
	}

	// The value is digits × 10^exp, digits being the integer and fraction
	// digits in one sequence; trim its zeros at both ends.
	digits := func(i int) byte {
		if i < intEnd {
			return b[i]
		}
		return b[fracStart+i-intEnd]
	}
	first, last := 0, intEnd+fracEnd-fracStart // the digits in use: [first, last)
	exp -= fracEnd - fracStart
	for first < last && digits(first) == '0' {
		first++
	}
	for last > first && digits(last-1) == '0' {
		last--
		exp++
	}
	if first == last {
		return 0, ""
	}
	if exp < 0 {
		return 0, "is not an integer"
	}
	if last-first+exp > 19 {
		return 0, "is out of range"
	}
	var u uint64
	for i := first; i < last; i++ {
		u = u*10 + uint64(digits(i)-'0')
	}
	for range exp {
		u *= 10
	}
	// At most 19 digits: u < 10^19 < 2^64, no overflow above.
	switch {
	case !neg && u <= math.MaxInt64:
		return int64(u), ""
	case neg && u <= 1<<63:
		return int64(-u), ""
	}
	return 0, "is out of range"
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isDigits(b []byte) bool {
	for _, c := range b {
		if !isDigit(c) {
			return false
		}
	}
	return true
}
