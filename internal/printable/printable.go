// Package printable shows text that producers and handlers choose
// (aggregate IDs, topics, handler errors) to an operator, on a terminal or
// the status page, so that it cannot pass for other text.
package printable

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// String returns s as it is when it is valid UTF-8 and every rune of it
// is printable, else quoted with Go escapes. A producer could otherwise
// put escape sequences, carriage returns, bidi overrides (U+202A–U+202E,
// U+2066–U+2069, not printable for strconv) or invalid UTF-8 before an
// operator, and make one aggregate ID read as another. The quotes tell
// such a string apart from a plain one that looks the same: a string that
// starts with a quote itself (`"\xff"`, six characters, is not the byte
// 0xff) or with or after white space (which a table column does not show)
// is quoted too.
func String(s string) string {
	if !utf8.ValidString(s) || strings.IndexFunc(s, func(r rune) bool { return !strconv.IsPrint(r) }) >= 0 ||
		strings.HasPrefix(s, `"`) || strings.TrimSpace(s) != s {
		return strconv.Quote(s)
	}
	return s
}
