package cli

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// termSafe returns s as it is when it is valid UTF-8 and every rune of it
// is printable, else quoted with Go escapes. What the terminal tables show
// comes from Kafka (aggregate IDs, topics, handler errors), so a producer
// could otherwise put escape sequences, carriage returns, bidi overrides
// (U+202A–U+202E, U+2066–U+2069, not printable for strconv) or invalid
// UTF-8 on an operator's terminal. The quotes tell such a string apart
// from a plain one that looks the same: a string that starts with a quote
// itself (`"\xff"`, six characters, is not the byte 0xff) or with or
// after white space (which a table column does not show) is quoted too.
func termSafe(s string) string {
	if !utf8.ValidString(s) || strings.IndexFunc(s, func(r rune) bool { return !strconv.IsPrint(r) }) >= 0 ||
		strings.HasPrefix(s, `"`) || strings.TrimSpace(s) != s {
		return strconv.Quote(s)
	}
	return s
}

// termLines is termSafe for each line of s: an error may carry what Kafka
// says (a group's member and client IDs, which any client chooses; a
// broker's message) across the lines it is laid out in.
func termLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = termSafe(l)
	}
	return strings.Join(lines, "\n")
}
