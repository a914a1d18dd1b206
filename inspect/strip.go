package inspect

import (
	"strings"
	"unicode/utf8"
)

// StripHidden returns data without the text an agent would read and a
// person would not see: Unicode tag characters, zero-width spaces and
// joiners in runs (a lone zero-width joiner, as in emoji, stays), bidi
// embedding and override controls, and, for HTML, comments. It is what a
// policy that strips rather than blocks a response applies; visible text is
// untouched, so an injected visible instruction survives (that is a finding
// to flag or block on).
func StripHidden(contentType string, data []byte) []byte {
	out := make([]byte, 0, len(data))
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if hiddenRune(r) && !(r == 0x200D && loneJoiner(data, i, n)) {
			i += n
			continue
		}
		out = append(out, data[i:i+n]...)
		i += n
	}
	if strings.Contains(strings.ToLower(contentType), "html") {
		out = htmlCommentRE().ReplaceAll(out, nil)
	}
	return out
}

func hiddenRune(r rune) bool {
	return r >= 0xE0000 && r <= 0xE007F || r == 0x200B || r == 0x200C || r == 0x200D || r >= 0x2060 && r <= 0x2064 ||
		r == 0xFEFF || r >= 0x202A && r <= 0x202E || r >= 0x2066 && r <= 0x2069
}

// loneJoiner reports whether the zero-width joiner at i (n bytes) has no
// zero-width character on either side.
func loneJoiner(data []byte, i, n int) bool {
	if r, _ := utf8.DecodeRune(data[i+n:]); hiddenRune(r) {
		return false
	}
	if r, _ := utf8.DecodeLastRune(data[:i]); hiddenRune(r) {
		return false
	}
	return true
}
