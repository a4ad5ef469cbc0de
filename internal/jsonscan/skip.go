package jsonscan

import "encoding/binary"

// maxDepth is how deep a member's value may nest: encoding/json's limit
// (10000) counts the top-level object too.
const maxDepth = 10000 - 1

// skipSpace returns the index of the first byte at or after i that is
// not JSON whitespace (len(doc) if none).
func skipSpace(doc []byte, i int) int {
	for i < len(doc) {
		switch doc[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipValue returns the index just past the JSON value that starts at
// doc[i], or -1 if it is malformed or cut short.
func skipValue(doc []byte, i int) int {
	if i >= len(doc) {
		return -1
	}
	switch c := doc[i]; c {
	case '"':
		return skipString(doc, i)
	case '{', '[':
		return skipContainer(doc, i)
	case 't':
		return skipLiteral(doc, i, "true")
	case 'f':
		return skipLiteral(doc, i, "false")
	case 'n':
		return skipLiteral(doc, i, "null")
	default:
		return skipNumber(doc, i)
	}
}

// skipLiteral returns the index past lit at doc[i], or -1.
func skipLiteral(doc []byte, i int, lit string) int {
	if len(doc)-i < len(lit) || string(doc[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// isNumberStart says whether c starts a JSON number.
func isNumberStart(c byte) bool { return c == '-' || ('0' <= c && c <= '9') }

// skipNumber returns the index past the JSON number at doc[i]
// (-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?), or -1.
func skipNumber(doc []byte, i int) int {
	if i < len(doc) && doc[i] == '-' {
		i++
	}
	switch {
	case i >= len(doc):
		return -1
	case doc[i] == '0':
		i++
	case '1' <= doc[i] && doc[i] <= '9':
		i = skipDigits(doc, i)
	default:
		return -1
	}
	if i < len(doc) && doc[i] == '.' {
		if i = skipDigits(doc, i+1); i < 0 {
			return -1
		}
	}
	if i < len(doc) && (doc[i] == 'e' || doc[i] == 'E') {
		i++
		if i < len(doc) && (doc[i] == '+' || doc[i] == '-') {
			i++
		}
		return skipDigits(doc, i)
	}
	return i
}

// skipDigits returns the index past one or more digits at doc[i], or -1
// if there is none.
func skipDigits(doc []byte, i int) int {
	start := i
	for i < len(doc) && '0' <= doc[i] && doc[i] <= '9' {
		i++
	}
	if i == start {
		return -1
	}
	return i
}

// Eight bytes at a time: a byte of each, and each byte's high bit.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// skipString returns the index past the JSON string whose opening quote
// is doc[i], or -1 if it is malformed (a control character, a bad
// escape) or cut short. Runs of ordinary bytes are passed eight at a
// time.
func skipString(doc []byte, i int) int {
	i++
	for {
		for len(doc)-i >= 8 && !special8(binary.LittleEndian.Uint64(doc[i:])) {
			i += 8
		}
		if i >= len(doc) {
			return -1
		}
		switch c := doc[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			if i = skipEscape(doc, i); i < 0 {
				return -1
			}
		case c < 0x20:
			return -1
		default:
			i++
		}
	}
}

// special8 says whether any of the eight bytes in x is a quote, a
// backslash or a control character. Each test is exact for "any byte"
// (the borrow that may mark a higher byte wrongly only follows a byte
// that matched).
func special8(x uint64) bool {
	quote := x ^ (ones * '"')
	backslash := x ^ (ones * '\\')
	return ((quote-ones)&^quote|(backslash-ones)&^backslash|(x-ones*0x20)&^x)&highs != 0
}

// skipEscape returns the index past the escape at doc[i] (a backslash),
// or -1 if it is not one of JSON's.
func skipEscape(doc []byte, i int) int {
	if i+1 >= len(doc) {
		return -1
	}
	switch doc[i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return i + 2
	case 'u':
		if hex4(doc[i+2:]) < 0 {
			return -1
		}
		return i + 6
	}
	return -1
}

// hex4 is the value of the four hex digits b starts with, or -1.
func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}
