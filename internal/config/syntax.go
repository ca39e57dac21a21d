package config

import (
	"bytes"
	"regexp"
	"unicode/utf8"
)

var unknownAnchor = regexp.MustCompile(`^unknown anchor '(.*)' referenced$`)

// syntaxLine finds the line of a YAML syntax error msg that the yaml
// package reports without one, or 0: the first line holding a byte YAML
// refuses (invalid UTF-8, a control character) for the errors of its
// reader; the first alias of the anchor for an unknown anchor; else line 1,
// since the yaml package leaves out the line number exactly when its mark
// is on the first line.
func syntaxLine(data []byte, msg string) int {
	switch {
	case bytes.Contains([]byte(msg), []byte("UTF-8")), msg == "control characters are not allowed":
		for i := 0; i < len(data); {
			r, n := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && n <= 1 || !printable(r) {
				return 1 + bytes.Count(data[:i], []byte("\n"))
			}
			i += n
		}
		return 0
	case unknownAnchor.MatchString(msg):
		alias := "*" + unknownAnchor.FindStringSubmatch(msg)[1]
		if i := bytes.Index(data, []byte(alias)); i >= 0 {
			return 1 + bytes.Count(data[:i], []byte("\n"))
		}
		return 0
	}
	return 1
}

// printable reports whether YAML allows r in a stream (YAML 1.2, 5.1).
func printable(r rune) bool {
	switch {
	case r == '\t', r == '\n', r == '\r', r == 0x85:
		return true
	case r < ' ', r == 0x7f, 0x80 <= r && r <= 0x9f, r == 0xfffe, r == 0xffff, 0xd800 <= r && r <= 0xdfff:
		return false
	}
	return true
}
