package config

import (
	"errors"
	"fmt"
	"strings"
)

// Error is one problem in a configuration.
type Error struct {
	Path string // full key path, e.g. wow.dispatch.workers or wow.dispatchers.cart.topics[1]
	Line int    // 1-based line in the file; 0 when unknown
	Col  int    // 1-based column; 0 when unknown
	Msg  string
	// Outside marks a problem found in what the configuration names or
	// reads rather than in what it says: a file it names that cannot be
	// used, wow.metadata that cannot be read or does not agree. It may
	// pass while the configuration stays as it is (see [Invalid]).
	Outside bool
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

// Invalid reports whether err refuses a configuration for what it says:
// it is or wraps an *Errors whose every problem is in the document, the
// environment or the --set arguments; read again, the same configuration
// is refused again. Any other error may pass while the configuration stays
// as it is: a file that cannot be read, or a problem found outside it
// (Outside), together with any other problems, which may follow from it
// (contexts that wow.metadata did not fill).
func Invalid(err error) bool {
	var errs *Errors
	if !errors.As(err, &errs) || len(errs.List) == 0 {
		return false
	}
	for _, e := range errs.List {
		if e.Outside {
			return false
		}
	}
	return true
}
