package wow

import (
	"fmt"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth is the deepest nesting of objects and arrays accepted: the limit
// of encoding/json, so that both accept the same documents.
const maxDepth = 10000

// span is the text of a JSON string in the input, without its quotes.
type span struct {
	start, end int
	esc        bool // contains backslash escapes
}

// scanner reads one JSON document from data. It validates everything it
// reads and stops at the first syntax error, which it keeps in err.
type scanner struct {
	data  []byte
	pos   int
	depth int      // open objects and arrays around pos
	kinds []uint64 // bit depth%64 of word depth/64: the container at that depth is an object
}

// syntaxError is a JSON syntax error at a byte offset.
type syntaxError struct {
	offset int
	msg    string
}

func (s *scanner) errorf(format string, args ...any) *syntaxError {
	return &syntaxError{offset: s.pos, msg: fmt.Sprintf(format, args...)}
}

// unexpected reports the byte at pos, or the end of the input, where it
// does not belong.
func (s *scanner) unexpected(context string) *syntaxError {
	if s.pos >= len(s.data) {
		return s.errorf("unexpected end of input %s", context)
	}
	return s.errorf("invalid character %s %s", quoteByte(s.data[s.pos]), context)
}

func quoteByte(c byte) string {
	if c < utf8.RuneSelf {
		return fmt.Sprintf("%q", rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

func (s *scanner) ws() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek returns the byte at pos, or 0 at the end of the input.
func (s *scanner) peek() byte {
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

// expect consumes c, after optional whitespace.
func (s *scanner) expect(c byte, context string) *syntaxError {
	s.ws()
	if s.peek() != c {
		return s.unexpected(context)
	}
	s.pos++
	return nil
}

// open enters an object or an array at pos.
func (s *scanner) open(object bool) *syntaxError {
	if s.depth >= maxDepth {
		return s.errorf("nesting deeper than %d levels", maxDepth)
	}
	s.pos++
	s.depth++
	w, bit := s.depth/64, uint64(1)<<(s.depth%64)
	for len(s.kinds) <= w {
		s.kinds = append(s.kinds, 0)
	}
	if object {
		s.kinds[w] |= bit
	} else {
		s.kinds[w] &^= bit
	}
	return nil
}

func (s *scanner) inObject() bool {
	return s.kinds[s.depth/64]&(uint64(1)<<(s.depth%64)) != 0
}

// key reads an object key and the colon after it; pos is at the key's
// opening quote or at whitespace before it.
func (s *scanner) key() (span, *syntaxError) {
	s.ws()
	if s.peek() != '"' {
		return span{}, s.unexpected("looking for the beginning of an object key")
	}
	k, err := s.str()
	if err != nil {
		return k, err
	}
	return k, s.expect(':', "after an object key")
}

// next reads what follows a member of an object or an element of an array:
// it reports whether another one follows (after a comma) or the container
// closed, and consumes either.
func (s *scanner) next(object bool) (more bool, err *syntaxError) {
	s.ws()
	closing, context := byte(']'), "after an array element"
	if object {
		closing, context = '}', "after an object key:value pair"
	}
	switch s.peek() {
	case ',':
		s.pos++
		return true, nil
	case closing:
		s.pos++
		s.depth--
		return false, nil
	}
	return false, s.unexpected(context)
}

// empty consumes the closing bracket of an empty container just opened,
// and reports whether it did.
func (s *scanner) empty(closing byte) bool {
	s.ws()
	if s.peek() == closing {
		s.pos++
		s.depth--
		return true
	}
	return false
}

// skip reads one value of any type, validating it, without decoding it.
// Nested containers are tracked in kinds rather than on the Go stack, so
// deep input costs no recursion.
func (s *scanner) skip() *syntaxError {
	base := s.depth
	for {
		// At the beginning of a value.
		s.ws()
		if s.pos >= len(s.data) {
			return s.unexpected("looking for the beginning of a value")
		}
		switch c := s.data[s.pos]; c {
		case '{':
			if err := s.open(true); err != nil {
				return err
			}
			if !s.empty('}') {
				if _, err := s.key(); err != nil {
					return err
				}
				continue
			}
		case '[':
			if err := s.open(false); err != nil {
				return err
			}
			if !s.empty(']') {
				continue
			}
		case '"':
			if _, err := s.str(); err != nil {
				return err
			}
		case 't':
			if err := s.literal("true"); err != nil {
				return err
			}
		case 'f':
			if err := s.literal("false"); err != nil {
				return err
			}
		case 'n':
			if err := s.literal("null"); err != nil {
				return err
			}
		default:
			if _, err := s.number(); err != nil {
				return err
			}
		}
		// After a value: close containers until one has a next member.
		for s.depth > base {
			object := s.inObject()
			more, err := s.next(object)
			if err != nil {
				return err
			}
			if more {
				if object {
					if _, err := s.key(); err != nil {
						return err
					}
				}
				break
			}
		}
		if s.depth == base {
			return nil
		}
	}
}

// object reads an object (pos is at its '{'), calling member for each
// member with pos at the value, which member must read.
func (s *scanner) object(member func(key span) *syntaxError) *syntaxError {
	if err := s.open(true); err != nil {
		return err
	}
	if s.empty('}') {
		return nil
	}
	for {
		k, err := s.key()
		if err != nil {
			return err
		}
		s.ws()
		if err := member(k); err != nil {
			return err
		}
		more, err := s.next(true)
		if err != nil || !more {
			return err
		}
	}
}

// array reads an array (pos is at its '['), calling element for each
// element i with pos at the element, which element must read.
func (s *scanner) array(element func(i int) *syntaxError) *syntaxError {
	if err := s.open(false); err != nil {
		return err
	}
	if s.empty(']') {
		return nil
	}
	for i := 0; ; i++ {
		s.ws()
		if err := element(i); err != nil {
			return err
		}
		more, err := s.next(false)
		if err != nil || !more {
			return err
		}
	}
}

// literal reads true, false or null.
func (s *scanner) literal(lit string) *syntaxError {
	for i := 0; i < len(lit); i++ {
		if s.pos >= len(s.data) || s.data[s.pos] != lit[i] {
			return s.unexpected("in literal " + lit)
		}
		s.pos++
	}
	return nil
}

// number reads a number and returns its text.
func (s *scanner) number() (span, *syntaxError) {
	start := s.pos
	if s.peek() == '-' {
		s.pos++
	}
	switch c := s.peek(); {
	case c == '0':
		s.pos++
	case '1' <= c && c <= '9':
		s.digits()
	default:
		if s.pos == start {
			return span{}, s.unexpected("looking for the beginning of a value")
		}
		return span{}, s.unexpected("in numeric literal")
	}
	if s.peek() == '.' {
		s.pos++
		if !s.digits() {
			return span{}, s.unexpected("after decimal point in numeric literal")
		}
	}
	if c := s.peek(); c == 'e' || c == 'E' {
		s.pos++
		if c := s.peek(); c == '+' || c == '-' {
			s.pos++
		}
		if !s.digits() {
			return span{}, s.unexpected("in exponent of numeric literal")
		}
	}
	return span{start: start, end: s.pos}, nil
}

// digits reads a run of decimal digits and reports whether there was one.
func (s *scanner) digits() bool {
	start := s.pos
	for s.pos < len(s.data) && '0' <= s.data[s.pos] && s.data[s.pos] <= '9' {
		s.pos++
	}
	return s.pos > start
}

// plain marks the bytes that stand for themselves inside a string: all but
// the quote, the backslash and control characters. Bytes of invalid UTF-8
// are plain here, as in encoding/json; they become U+FFFD when decoded.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str reads a string (pos is at its opening quote) and returns its contents.
func (s *scanner) str() (span, *syntaxError) {
	s.pos++
	sp := span{start: s.pos}
	data := s.data
	for {
		i := s.pos
		for i < len(data) && plain[data[i]] {
			i++
		}
		s.pos = i
		if i >= len(data) {
			return sp, s.unexpected("in string literal")
		}
		switch data[i] {
		case '"':
			sp.end = i
			s.pos++
			return sp, nil
		case '\\':
			sp.esc = true
			s.pos++
			switch s.peek() {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.pos++
			case 'u':
				s.pos++
				for range 4 {
					if !isHex(s.peek()) {
						return sp, s.unexpected("in \\u hexadecimal character escape")
					}
					s.pos++
				}
			default:
				return sp, s.unexpected("in string escape code")
			}
		default:
			return sp, s.unexpected("in string literal")
		}
	}
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// is reports whether the string at sp equals lit, unescaping it if needed.
func (s *scanner) is(sp span, lit string) bool {
	raw := s.data[sp.start:sp.end]
	if !sp.esc {
		return string(raw) == lit
	}
	if len(raw) > 6*len(lit) { // an escape stands for at least one byte
		return false
	}
	var buf [128]byte
	return string(appendUnquoted(buf[:0], raw)) == lit
}

// appendUnquoted appends the decoded text of a string's contents (valid
// JSON, as checked by str) to dst, as encoding/json decodes it: escapes are
// resolved, a \u escape that is half of a surrogate pair becomes U+FFFD
// unless the next escape completes it, and each byte of invalid UTF-8
// becomes U+FFFD.
func appendUnquoted(dst, raw []byte) []byte {
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\':
			c = raw[i+1]
			i += 2
			switch c {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r := hex4(raw[i:])
				i += 4
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
						r2 = hex4(raw[i+2:])
					}
					if pair := utf16.DecodeRune(r, r2); pair != utf8.RuneError {
						r = pair
						i += 6
					} else {
						r = utf8.RuneError
					}
				}
				dst = utf8.AppendRune(dst, r)
			default: // '"', '\\', '/'
				dst = append(dst, c)
			}
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, n := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && n == 1 {
				dst = utf8.AppendRune(dst, utf8.RuneError)
			} else {
				dst = append(dst, raw[i:i+n]...)
			}
			i += n
		}
	}
	return dst
}

// hex4 decodes four hexadecimal digits (checked by str).
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c <= '9':
			c -= '0'
		case c <= 'F':
			c -= 'A' - 10
		default:
			c -= 'a' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// stringWriter copies decoded strings into one buffer and hands them out
// as substrings of it, so that all the strings of a message cost one
// allocation and share no memory with the input.
type stringWriter struct {
	b    strings.Builder
	ends []int // end offset in b of each string added, in order
}

// add appends the string at sp of data.
func (w *stringWriter) add(data []byte, sp span) {
	raw := data[sp.start:sp.end]
	if !sp.esc && utf8.Valid(raw) {
		w.b.Write(raw)
	} else {
		w.b.Write(appendUnquoted(nil, raw))
	}
	w.ends = append(w.ends, w.b.Len())
}

// end checks that only whitespace follows the top-level value.
func (s *scanner) end() *syntaxError {
	s.ws()
	if s.pos < len(s.data) {
		return s.unexpected("after the top-level value")
	}
	return nil
}

// keyText returns a key's text for matching with field: its raw bytes
// when it has no escapes, else its decoded form (or nil when it is too long
// to be a field name).
func (s *scanner) keyText(k span, buf *[128]byte) []byte {
	raw := s.data[k.start:k.end]
	if !k.esc {
		return raw
	}
	if len(raw) > 6*len("aggregateVersion") { // an escape stands for at least one byte
		return nil
	}
	return appendUnquoted(buf[:0], raw)
}

// rawValue is a value read for a scalar field: its type (see typeOf; 0
// when absent) and, for a string or a number, its text.
type rawValue struct {
	typ byte
	sp  span
}

// scalar reads a value of a scalar field: a string or a number keeps its
// text; any other value is only typed (and skipped).
func (s *scanner) scalar() (rawValue, *syntaxError) {
	c := s.peek()
	v := rawValue{typ: typeOf(c)}
	var err *syntaxError
	switch v.typ {
	case '"':
		v.sp, err = s.str()
	case '0':
		v.sp, err = s.number()
	default:
		err = s.skip()
	}
	return v, err
}

// typeOf classifies a value by its first byte: '"' string, '0' number,
// 't' boolean, 'n' null, '{' object, '[' array.
func typeOf(c byte) byte {
	switch c {
	case '"', 'n', '{', '[':
		return c
	case 't', 'f':
		return 't'
	}
	return '0' // or invalid, which skip reports
}

// typeName names a value's type by its first byte, for errors.
func typeName(c byte) string {
	switch typeOf(c) {
	case '"':
		return "a string"
	case 'n':
		return "null"
	case 't':
		return "a boolean"
	case '{':
		return "an object"
	case '[':
		return "an array"
	}
	return "a number"
}
