package termtext

import (
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// Safe reports whether r is printed as itself by Escape: printable (as
// strconv.IsPrint has it) and not a backslash.
func Safe(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= 0x20 && r < 0x7f && r != '\\'
	}
	return strconv.IsPrint(r)
}

// clean returns the length of the prefix of s Escape leaves as it is.
func clean(s string) int {
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b < 0x20 || b >= 0x7f || b == '\\' {
				return i
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || !strconv.IsPrint(r) {
			return i
		}
		i += size
	}
	return len(s)
}

// Escape returns s with every rune that is not Safe, and every byte of
// invalid UTF-8, written as a visible escape (see the package doc). Text with
// nothing to escape is returned as it is, without copying.
func Escape(s string) string {
	n := clean(s)
	if n == len(s) {
		return s
	}
	b := make([]byte, 0, len(s)+16)
	b = append(b, s[:n]...)
	for i := n; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = appendHex(append(b, '\\', 'x'), uint32(s[i]), 2)
		case r == '\\':
			b = append(b, '\\', '\\')
		case r == '\t':
			b = append(b, '\\', 't')
		case r == '\n':
			b = append(b, '\\', 'n')
		case r == '\r':
			b = append(b, '\\', 'r')
		case Safe(r):
			b = append(b, s[i:i+size]...)
		case r < utf8.RuneSelf:
			b = appendHex(append(b, '\\', 'x'), uint32(r), 2)
		case r <= 0xffff:
			b = appendHex(append(b, '\\', 'u'), uint32(r), 4)
		default:
			b = appendHex(append(b, '\\', 'U'), uint32(r), 8)
		}
		i += size
	}
	return string(b)
}

// EscapeJSON returns a copy of the JSON text doc with every rune inside a
// string that is not printable (the backslash excepted: in JSON it is
// syntax) written as a JSON \u escape, a surrogate pair above U+FFFF, and
// each byte of invalid UTF-8 as \ufffd, which is what a JSON decoder reads it
// as: every value decodes as before. Between values, newline and tab are
// kept and a carriage return becomes a space (all three are JSON
// whitespace); anything else escaped there was not valid JSON to begin with.
func EscapeJSON(doc []byte) []byte {
	out := make([]byte, 0, len(doc)+16)
	inString, escaped := false, false
	for i := 0; i < len(doc); {
		b := doc[i]
		if b >= 0x20 && b < 0x7f {
			switch {
			case escaped:
				escaped = false
			case inString && b == '\\':
				escaped = true
			case b == '"':
				inString = !inString
			}
			out = append(out, b)
			i++
			continue
		}
		escaped = false
		r, size := utf8.DecodeRune(doc[i:])
		switch {
		case !inString && (b == '\t' || b == '\n'):
			out = append(out, b)
		case !inString && b == '\r':
			out = append(out, ' ')
		case r == utf8.RuneError && size == 1:
			out = append(out, `\ufffd`...)
		case r >= utf8.RuneSelf && strconv.IsPrint(r):
			out = append(out, doc[i:i+size]...)
		case r > 0xffff:
			hi, lo := utf16.EncodeRune(r)
			out = appendHex(append(out, '\\', 'u'), uint32(hi), 4)
			out = appendHex(append(out, '\\', 'u'), uint32(lo), 4)
		default:
			out = appendHex(append(out, '\\', 'u'), uint32(r), 4)
		}
		i += size
	}
	return out
}

// appendHex appends v as digits lowercase hex digits.
func appendHex(b []byte, v uint32, digits int) []byte {
	for shift := 4 * (digits - 1); shift >= 0; shift -= 4 {
		b = append(b, hexDigits[v>>uint(shift)&0xf])
	}
	return b
}
