package inspect

import (
	"bytes"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"unicode/utf8"
)

// decoded is one decoding of a token run.
type decoded struct {
	name string // "base64", "hex", "base32"
	data []byte
}

// maxRunDecode bounds the token run the decoders try; a longer one (an
// inline image) is left alone.
const maxRunDecode = 256 << 10

// decodeRun returns the text a token run decodes to: hex, base32 or base64
// (standard or URL-safe, padded or not, at any of the four alignments for a
// short run, which catches base64 glued to a word). Only decodings that are
// text are kept: a hash or an image decodes to binary and is dropped.
func decodeRun(run []byte) []decoded {
	if len(run) > maxRunDecode {
		return nil
	}
	var out []decoded
	for rest := run; len(rest) > 0; {
		var seg []byte
		if i := bytes.IndexByte(rest, '='); i >= 0 {
			seg, rest = rest[:i], rest[i+1:]
		} else {
			seg, rest = rest, nil
		}
		if len(seg) < minRun {
			continue
		}
		if d, ok := decodeHex(seg); ok {
			out = append(out, decoded{"hex", d})
			continue
		}
		if d, ok := decodeBase32(seg); ok {
			out = append(out, decoded{"base32", d})
			continue
		}
		if d, ok := decodeBase64(seg); ok {
			out = append(out, decoded{"base64", d})
		}
	}
	return out
}

func decodeHex(seg []byte) ([]byte, bool) {
	for _, c := range seg {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return nil, false
		}
	}
	if len(seg)%2 == 1 {
		seg = seg[:len(seg)-1]
	}
	var stack [scratchDecode]byte
	d := stack[:]
	if len(seg)/2 > len(d) {
		d = make([]byte, len(seg)/2)
	}
	d = d[:len(seg)/2]
	if _, err := hex.Decode(d, seg); err != nil || !isText(d) {
		return nil, false
	}
	return append([]byte(nil), d...), true
}

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

func decodeBase32(seg []byte) ([]byte, bool) {
	upper, lowerCase := true, true
	for _, c := range seg {
		switch {
		case 'A' <= c && c <= 'Z':
			lowerCase = false
		case 'a' <= c && c <= 'z':
			upper = false
		case '2' <= c && c <= '7':
		default:
			return nil, false
		}
	}
	if !upper && !lowerCase {
		return nil, false
	}
	s := bytes.ToUpper(seg)
	// Drop the tail that cannot be a whole base32 quantum's start.
	for _, cut := range []int{0, 1, 2, 3} {
		if len(s)-cut < minRun {
			break
		}
		if d, err := b32.DecodeString(string(s[:len(s)-cut])); err == nil {
			if isText(d) {
				return d, true
			}
			return nil, false
		}
	}
	return nil, false
}

func decodeBase64(seg []byte) ([]byte, bool) {
	std, url := true, true
	for _, c := range seg {
		switch c {
		case '+', '/':
			url = false
		case '-', '_':
			std = false
		}
	}
	if !std && !url {
		return nil, false // both alphabets' own bytes: neither decodes it
	}
	var encs []*base64.Encoding
	if std {
		encs = append(encs, base64.RawStdEncoding)
	}
	if url {
		encs = append(encs, base64.RawURLEncoding)
	}
	offsets := []int{0}
	if len(seg) <= 4096 {
		offsets = []int{0, 1, 2, 3}
	}
	// Most runs (identifiers, hashes) decode to binary and are dropped:
	// a short one is decoded on the stack and copied only when it is text.
	var stack [scratchDecode]byte
	buf := stack[:]
	if n := base64.RawStdEncoding.DecodedLen(len(seg)); n > len(buf) {
		buf = make([]byte, n)
	}
	for _, off := range offsets {
		s := seg[off:]
		if len(s)%4 == 1 {
			s = s[:len(s)-1]
		}
		if len(s) < minRun {
			break
		}
		for _, e := range encs {
			n, err := e.Decode(buf, s)
			if err == nil && isText(buf[:n]) {
				return append([]byte(nil), buf[:n]...), true
			}
		}
	}
	return nil, false
}

// scratchDecode is the decoded size decodeBase64 and decodeHex try on the
// stack.
const scratchDecode = 512

// isText reports whether b is UTF-8 text with few control characters.
func isText(b []byte) bool {
	if len(b) == 0 || !utf8.Valid(b) {
		return false
	}
	ctl := 0
	for _, c := range b {
		if c < 0x20 && c != '\n' && c != '\r' && c != '\t' || c == 0x7f {
			ctl++
		}
	}
	return ctl*20 <= len(b)
}

// percentDecode decodes %XX escapes (and '+' as a space only where they
// occur); ok is false when data has none.
func percentDecode(data []byte) ([]byte, bool) {
	i := bytes.IndexByte(data, '%')
	if i < 0 {
		return nil, false
	}
	out := make([]byte, 0, len(data))
	out = append(out, data[:i]...)
	n := 0
	for ; i < len(data); i++ {
		c := data[i]
		if c == '%' && i+2 < len(data) && isHex(data[i+1]) && isHex(data[i+2]) {
			out = append(out, unhex(data[i+1])<<4|unhex(data[i+2]))
			i += 2
			n++
			continue
		}
		out = append(out, c)
	}
	return out, n > 0
}

// unescape decodes \uXXXX, \u{X...}, \xXX and \/ escapes; ok is false when
// data has none.
func unescape(data []byte) ([]byte, bool) {
	i := bytes.IndexByte(data, '\\')
	if i < 0 {
		return nil, false
	}
	out := make([]byte, 0, len(data))
	out = append(out, data[:i]...)
	n := 0
	for ; i < len(data); i++ {
		c := data[i]
		if c != '\\' || i+1 >= len(data) {
			out = append(out, c)
			continue
		}
		switch data[i+1] {
		case 'u':
			if i+5 < len(data) && isHex(data[i+2]) && isHex(data[i+3]) && isHex(data[i+4]) && isHex(data[i+5]) {
				r := rune(unhex(data[i+2]))<<12 | rune(unhex(data[i+3]))<<8 | rune(unhex(data[i+4]))<<4 | rune(unhex(data[i+5]))
				out = utf8.AppendRune(out, r)
				i += 5
				n++
				continue
			}
			if i+2 < len(data) && data[i+2] == '{' {
				j, r := i+3, rune(0)
				for j < len(data) && j < i+11 && isHex(data[j]) {
					r = r<<4 | rune(unhex(data[j]))
					j++
				}
				if j < len(data) && data[j] == '}' && j > i+3 {
					out = utf8.AppendRune(out, r)
					i = j
					n++
					continue
				}
			}
		case 'x':
			if i+3 < len(data) && isHex(data[i+2]) && isHex(data[i+3]) {
				out = append(out, unhex(data[i+2])<<4|unhex(data[i+3]))
				i += 3
				n++
				continue
			}
		case '/':
			out = append(out, '/')
			i++
			n++
			continue
		}
		out = append(out, c)
	}
	return out, n > 0
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}
