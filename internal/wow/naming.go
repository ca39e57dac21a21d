package wow

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// SnakeName returns the message name Wow gives a command or event class by
// default, from its fully qualified class name: the simple name (after the
// last '.' or '$'), split before every ASCII capital letter except a leading
// one, the words lowercased and joined with '_'. AddCartItem becomes
// add_cart_item, CartItemAdded cart_item_added, HTTPRequestSent
// h_t_t_p_request_sent (each capital starts a word), Order2Created
// order2_created (digits start no word), Add_Item add__item.
//
// This matches Wow's PascalToSnakeConverter (wow-core, package
// me.ahoo.wow.naming.annotation) at commit 081d6f0 and NamingConverter.kt:
// PASCAL_TO_SNAKE segments the simple class name with PascalCaseStrategy,
// which is a Java Pattern split on the lookahead (?=[A-Z]) (Java's split
// drops the empty leading piece of a zero-width match at index 0), and
// joins the pieces with SnakeCaseStrategy ("_", each piece lowercased with
// Kotlin's lowercase()).
//
// A class annotated @Name("...") is named by the annotation instead, which
// metadata does not record: there SnakeName is wrong, and only the names in
// the messages themselves ([Message.Name], [Message.Events]) are certain.
// Non-ASCII letters are lowercased with Go's simple case mapping; Java's
// full mapping differs for U+0130 (İ) and a final capital sigma, which class
// names do not use in practice.
func SnakeName(fqcn string) string {
	simple := fqcn[strings.LastIndexAny(fqcn, ".$")+1:]
	var b strings.Builder
	b.Grow(len(simple) + 4)
	for i, r := range simple {
		switch {
		case 'A' <= r && r <= 'Z':
			if i > 0 {
				b.WriteByte('_')
			}
			b.WriteByte(byte(r) + 'a' - 'A')
		case r < utf8.RuneSelf:
			b.WriteByte(byte(r))
		default:
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String()
}
