package cli

import (
	"strings"

	"github.com/wowd/wowd/internal/printable"
)

// termSafe is what the terminal tables show of text from Kafka (aggregate
// IDs, topics, handler errors): printable.String.
func termSafe(s string) string { return printable.String(s) }

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
