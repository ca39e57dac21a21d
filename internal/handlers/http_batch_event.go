package handlers

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"mime"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/wowd/wowd/handler"
)

// encodeEvent encodes attempt of m, whose try has ctx, as a structured-mode
// CloudEvent in the JSON format, for a batch, and returns it with its id.
// live is the sink's settings, read once by the caller: the headers are
// built and the configured ones left out with the same headers-from-file,
// so a reload renaming one cannot put its value in the event.
//
// Its attributes are what the binary mode sends as headers, so the two
// modes cannot drift apart: the headers newRequest builds, but for
// Content-Type (the datacontenttype attribute) and the configured headers
// (sent on the batch's request). A ce- header is the attribute it names,
// its value decoded; any other header is an extension attribute whose name
// is the header's, lower case, without the characters CloudEvents does not
// allow in a name (kafka-offset: kafkaoffset; wow-header-trace_id:
// wowheadertraceid). Two headers making one name give the attribute of the
// first in byte order. Values are strings, as in the headers; a header sent
// more than once (a record header) is one attribute, its values joined
// with commas. The value of m is data when it is JSON (a Wow message, or a
// JSON content type) and data_base64 otherwise; an empty value has
// neither.
func (s *httpSink) encodeEvent(ctx context.Context, m *handler.Message, attempt int, live *httpLive) (event []byte, id string, err error) {
	req, err := s.newRequest(ctx, m, attempt, live)
	if err != nil {
		return nil, "", err
	}
	// The attribute names, as spans of names, sorted; one allocation for
	// all of them.
	type attribute struct {
		name   span // in names
		header string
	}
	attrs := make([]attribute, 0, len(req.Header))
	names := make([]byte, 0, 24*len(req.Header))
	for k := range req.Header {
		if k == hdrContentType || s.configuredHeader(live, k) {
			continue
		}
		a := attribute{header: k}
		a.name.from = len(names)
		names = appendAttributeName(names, k)
		a.name.to = len(names)
		attrs = append(attrs, a)
	}
	name := func(a attribute) []byte { return names[a.name.from:a.name.to] }
	slices.SortFunc(attrs, func(a, b attribute) int {
		if c := bytes.Compare(name(a), name(b)); c != 0 {
			return c
		}
		return strings.Compare(a.header, b.header)
	})

	buf := make([]byte, 0, 1024+len(m.Value)+len(m.Value)/3)
	buf = append(buf, '{')
	var prev []byte
	for _, a := range attrs {
		n := name(a)
		if len(n) == 0 || bytes.Equal(n, prev) {
			continue
		}
		prev = n
		vs := req.Header[a.header]
		v := vs[0]
		if len(vs) > 1 {
			v = strings.Join(vs, ",")
		}
		if strings.HasPrefix(a.header, "Ce-") {
			v = ceDecode(v)
		}
		if a.header == hdrID {
			id = strings.ToValidUTF8(v, "\uFFFD") // as the event has it: results name it so
		}
		buf = append(buf, '"')
		buf = append(buf, n...) // letters and digits: nothing to escape
		buf = append(buf, '"', ':')
		buf = appendJSONString(buf, v)
		buf = append(buf, ',')
	}
	ct := req.Header.Get(hdrContentType)
	buf = append(buf, `"datacontenttype":`...)
	buf = appendJSONString(buf, ct)
	switch {
	case len(m.Value) == 0:
	case (m.Wow != nil || jsonMediaType(ct)) && json.Valid(m.Value) && utf8.Valid(m.Value):
		// json.Valid takes any bytes in strings; JSON between systems
		// is UTF-8 (RFC 8259), and a strict server would refuse the
		// whole batch for one such value: base64 instead.
		buf = append(buf, `,"data":`...)
		buf = append(buf, m.Value...)
	default:
		buf = append(buf, `,"data_base64":"`...)
		buf = base64.StdEncoding.AppendEncode(buf, m.Value)
		buf = append(buf, '"')
	}
	buf = append(buf, '}')
	return buf, id, nil
}

// configuredHeader reports whether the canonical header k is one of the
// configured headers (headers, headers-from-env, and headers-from-file as
// live has them).
func (s *httpSink) configuredHeader(live *httpLive, k string) bool {
	if _, ok := s.static[k]; ok {
		return true
	}
	for _, f := range live.files {
		if f.name == k {
			return true
		}
	}
	return false
}

// attributeName is the CloudEvents attribute of header k: for Ce-X, x;
// otherwise k; lower case, with only the letters and digits kept.
func attributeName(k string) string { return string(appendAttributeName(nil, k)) }

// appendAttributeName appends attributeName(k).
func appendAttributeName(b []byte, k string) []byte {
	if rest, ok := strings.CutPrefix(k, "Ce-"); ok {
		k = rest
	}
	for i := range len(k) {
		switch c := k[i]; {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
			b = append(b, c)
		case 'A' <= c && c <= 'Z':
			b = append(b, c+'a'-'A')
		}
	}
	return b
}

// jsonMediaType reports whether ct is a JSON media type: application/json
// or a +json suffix.
func jsonMediaType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// ceDecode undoes ceEncode: each %XX is the byte XX.
func ceDecode(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if ok1 && ok2 {
				b = append(b, hi<<4|lo)
				i += 2
				continue
			}
		}
		b = append(b, s[i])
	}
	return string(b)
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// appendJSONString appends s as a JSON string: quotes, backslashes and
// control characters escaped, each run of invalid UTF-8 replaced by U+FFFD
// (as strings.ToValidUTF8 does).
func appendJSONString(buf []byte, s string) []byte {
	const hex = "0123456789abcdef"
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	buf = append(buf, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				buf = append(buf, '\\', c)
			case c == '\n':
				buf = append(buf, '\\', 'n')
			case c == '\r':
				buf = append(buf, '\\', 'r')
			case c == '\t':
				buf = append(buf, '\\', 't')
			case c < ' ':
				buf = append(buf, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
			default:
				buf = append(buf, c)
			}
			i++
			continue
		}
		_, n := utf8.DecodeRuneInString(s[i:])
		buf = append(buf, s[i:i+n]...)
		i += n
	}
	return append(buf, '"')
}
