package config

import (
	"fmt"
	"strings"
)

// Error is one problem in a configuration.
type Error struct {
	Path string // full key path, e.g. wow.dispatch.workers or wow.dispatchers.cart.topics[1]
	Line int    // 1-based line in the file; 0 when unknown
	Col  int    // 1-based column; 0 when unknown
	Msg  string
}

// Error renders the problem as `line:col: path: message`, leaving out what
// is unknown.
func (e Error) Error() string {
	var b strings.Builder
	switch {
	case e.Line > 0 && e.Col > 0:
		fmt.Fprintf(&b, "%d:%d: ", e.Line, e.Col)
	case e.Line > 0:
		fmt.Fprintf(&b, "%d: ", e.Line)
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in one configuration file.
type Errors struct {
	File string
	List []Error
}

// Error renders one problem per line as `file:line:col: path: message`.
func (e *Errors) Error() string {
	var b strings.Builder
	for i, err := range e.List {
		if i > 0 {
			b.WriteByte('\n')
		}
		if e.File != "" {
			b.WriteString(e.File)
			b.WriteByte(':')
			if err.Line == 0 {
				b.WriteByte(' ')
			}
		}
		b.WriteString(err.Error())
	}
	return b.String()
}
