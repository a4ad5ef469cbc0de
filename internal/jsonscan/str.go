package jsonscan

import (
	"bytes"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Unquote returns the text of raw, a JSON string with its quotes (as
// Member returns it), unescaped; ok is false if raw is not a JSON
// string. The text is raw's own bytes, not a copy, when it has no
// escapes and is valid UTF-8; else a new slice, with bytes that are not
// UTF-8 replaced by U+FFFD as encoding/json does.
func Unquote(raw []byte) (text []byte, ok bool) {
	if !isString(raw) {
		return nil, false
	}
	content := raw[1 : len(raw)-1]
	if plain(content) {
		return content, true
	}
	out := make([]byte, 0, len(content))
	for i := 0; i < len(content); {
		var r rune
		r, i = decodeRune(content, i)
		out = utf8.AppendRune(out, r)
	}
	return out, true
}

// String is Unquote's text as a string of its own, for a caller that
// keeps it beyond the document: one allocation (none for "").
func String(raw []byte) (string, bool) {
	if !isString(raw) {
		return "", false
	}
	content := raw[1 : len(raw)-1]
	if plain(content) {
		return string(content), true
	}
	var b strings.Builder
	b.Grow(len(content))
	for i := 0; i < len(content); {
		var r rune
		r, i = decodeRune(content, i)
		b.WriteRune(r)
	}
	return b.String(), true
}

// StringMember is the text of doc's top-level member name when it is a
// string, as a string of its own; "" when doc has no such member or it
// is not a string.
func StringMember(doc []byte, name string) string {
	raw, ok := Member(doc, name)
	if !ok {
		return ""
	}
	s, _ := String(raw)
	return s
}

// Equal says whether raw is a JSON string whose text is s, without
// allocating.
func Equal(raw []byte, s string) bool {
	if !isString(raw) {
		return false
	}
	return keyIs(raw, s)
}

// isString says whether raw is one whole JSON string.
func isString(raw []byte) bool {
	return len(raw) >= 2 && raw[0] == '"' && skipString(raw, 0) == len(raw)
}

// plain says whether a string's content is its text: no escapes, valid
// UTF-8.
func plain(content []byte) bool {
	return bytes.IndexByte(content, '\\') < 0 && utf8.Valid(content)
}

// equalDecoded says whether content, a JSON string's content as scanned,
// decodes to s. It stops at the first rune that differs.
func equalDecoded(content []byte, s string) bool {
	if !utf8.ValidString(s) {
		return false // a JSON string decodes to valid UTF-8 only
	}
	i := 0
	for _, want := range s {
		if i >= len(content) {
			return false
		}
		var r rune
		if r, i = decodeRune(content, i); r != want {
			return false
		}
	}
	return i == len(content)
}

// decodeRune decodes the rune at content[i] of a scanned JSON string's
// content, an escape or a UTF-8 sequence, as encoding/json does: a byte
// that is not UTF-8, or a \u escape of a lone surrogate, is U+FFFD. It
// returns the index past it.
func decodeRune(content []byte, i int) (rune, int) {
	c := content[i]
	if c < utf8.RuneSelf {
		if c != '\\' {
			return rune(c), i + 1
		}
		switch e := content[i+1]; e {
		case 'b':
			return '\b', i + 2
		case 'f':
			return '\f', i + 2
		case 'n':
			return '\n', i + 2
		case 'r':
			return '\r', i + 2
		case 't':
			return '\t', i + 2
		case 'u':
			return decodeU(content, i)
		default: // '"', '\\', '/'
			return rune(e), i + 2
		}
	}
	r, size := utf8.DecodeRune(content[i:])
	return r, i + size // utf8.RuneError, size 1, for a byte that is not UTF-8
}

// decodeU decodes the \u escape at content[i], with the one after it if
// the two are a surrogate pair.
func decodeU(content []byte, i int) (rune, int) {
	r := hex4(content[i+2:])
	i += 6
	if !utf16.IsSurrogate(r) {
		return r, i
	}
	if len(content)-i >= 6 && content[i] == '\\' && content[i+1] == 'u' {
		if pair := utf16.DecodeRune(r, hex4(content[i+2:])); pair != utf8.RuneError {
			return pair, i + 6
		}
	}
	return utf8.RuneError, i
}

// Bool returns the value of raw, a JSON true or false; ok is false for
// anything else (null included).
func Bool(raw []byte) (v, ok bool) {
	switch string(raw) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

// IsNull says whether raw is JSON's null.
func IsNull(raw []byte) bool { return string(raw) == "null" }
