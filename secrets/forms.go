package secrets

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"sort"
	"strings"
)

// minCoreLen is the shortest base64 core (of a value at a non-zero offset) worth
// scrubbing; shorter ones would match unrelated text.
const minCoreLen = 8

// CanaryForms returns the spellings of value that must never reach a sandbox:
// the raw value, its standard, raw, URL and raw-URL base64, lower and upper hex,
// percent-encodings (query, path, and every byte escaped in upper and lower case),
// its JSON string escapings (HTML-safe, plain, and with \/ for /), and the base64 cores it leaves when encoded at byte
// offsets 1 and 2 of a larger blob. Longest first, no duplicates, no empty
// strings. Tests grep logs and audit files for each of them; the response
// scrubber replaces each of them.
func CanaryForms(value string) []string {
	if value == "" {
		return nil
	}
	b := []byte(value)
	set := map[string]struct{}{}
	add := func(s string) {
		if s != "" {
			set[s] = struct{}{}
		}
	}
	add(value)
	add(base64.StdEncoding.EncodeToString(b))
	add(base64.RawStdEncoding.EncodeToString(b))
	add(base64.URLEncoding.EncodeToString(b))
	add(base64.RawURLEncoding.EncodeToString(b))
	h := hex.EncodeToString(b)
	add(h)
	add(strings.ToUpper(h))
	add(url.QueryEscape(value))
	add(url.PathEscape(value))
	add(percentAll(b, "0123456789ABCDEF"))
	add(percentAll(b, "0123456789abcdef"))
	if j, err := json.Marshal(value); err == nil { // HTML-safe: & < > as \u0026 ...
		add(string(j[1 : len(j)-1]))
	}
	var jb strings.Builder
	je := json.NewEncoder(&jb)
	je.SetEscapeHTML(false)
	if err := je.Encode(value); err == nil {
		j := strings.TrimSpace(jb.String())
		add(j[1 : len(j)-1])
		add(strings.ReplaceAll(j[1:len(j)-1], "/", `\/`)) // PHP-style escaped slashes
	}
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		for off := 0; off < 3; off++ {
			if c := base64Core(enc, b, off); len(c) >= minCoreLen {
				add(c)
			}
		}
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		if len(out[i]) != len(out[j]) {
			return len(out[i]) > len(out[j])
		}
		return out[i] < out[j]
	})
	return out
}

func percentAll(b []byte, digits string) string {
	var sb strings.Builder
	sb.Grow(3 * len(b))
	for _, c := range b {
		sb.WriteByte('%')
		sb.WriteByte(digits[c>>4])
		sb.WriteByte(digits[c&15])
	}
	return sb.String()
}

// base64Core returns the base64 characters that depend only on value's bytes
// when value starts off bytes into a larger encoded blob: the whole 3-byte groups
// that lie inside value. Whatever surrounds value, those characters appear.
func base64Core(enc *base64.Encoding, value []byte, off int) string {
	skip := (3 - off%3) % 3 // bytes of value that share a group with the prefix
	if skip >= len(value) {
		return ""
	}
	inner := value[skip:]
	inner = inner[:len(inner)/3*3]
	return enc.EncodeToString(inner)
}
