package audit

import (
	"bytes"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"unicode"
)

// Redacted replaces a credential value the writer refused to log.
const Redacted = "[REDACTED]"

// sensitiveNames are header names whose values never reach the audit file,
// wherever they appear in Extra (as a key at any depth, case-insensitively).
var sensitiveNames = [...]string{"authorization", "cookie", "set-cookie", "proxy-authorization"}

// IsSensitiveName reports whether a header or field name carries a credential whose
// value must never be logged: Authorization, Cookie, Set-Cookie,
// Proxy-Authorization, in any case, with any run of non-alphanumeric characters
// ("-", "_", " ", ".", NUL) as separator and any such characters around it
// ("Authorization:", "cookie\x00").
func IsSensitiveName(name string) bool {
	n := normName(name)
	for _, s := range sensitiveNames {
		if n == s {
			return true
		}
	}
	return false
}

// normName lowercases name, turns each run of characters other than letters and
// digits into one "-" and trims "-" from both ends.
func normName(name string) string {
	var b strings.Builder
	b.Grow(len(name))
	sep := false
	for _, r := range strings.ToLower(name) {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			if sep && b.Len() > 0 {
				b.WriteByte('-')
			}
			sep = false
			b.WriteRune(r)
			continue
		}
		sep = true
	}
	return b.String()
}

// sensitiveField reports whether m names a sensitive header in one of its
// name-like members (any case): {"name": "Cookie", "value": ...} as most
// encoders write it, {"Name": ..., "Value": ...} as a Go struct without tags
// does, {"key": ..., "value": ...} as Envoy's HeaderValue does.
func sensitiveField(m map[string]any) bool {
	for k, v := range m {
		switch strings.ToLower(k) {
		case "name", "key", "header", "field":
			if s, ok := v.(string); ok && IsSensitiveName(s) {
				return true
			}
		}
	}
	return false
}

// mentionsSensitive reports whether raw could hold a sensitive key anywhere.
// It is a cheap pre-filter: false means no rewrite is needed.
func mentionsSensitive(raw []byte) bool {
	l := bytes.ToLower(raw)
	return bytes.Contains(l, []byte("authorization")) || bytes.Contains(l, []byte("cookie")) ||
		bytes.Contains(l, []byte(`\u`)) // an escaped key could spell a sensitive name
}

// RedactQuery returns the sorted, de-duplicated keys of a raw URL query string
// (with or without the leading "?"), never its values. Keys are URL-unescaped
// where possible; an empty key is dropped.
func RedactQuery(rawQuery string) []string {
	rawQuery = strings.TrimPrefix(rawQuery, "?")
	if rawQuery == "" {
		return nil
	}
	var keys []string
	for part := range strings.SplitSeq(rawQuery, "&") {
		k, _, _ := strings.Cut(part, "=")
		if u, err := url.QueryUnescape(k); err == nil {
			k = u
		}
		if k != "" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// redact returns r itself when nothing needs changing, or a shallow copy with
// the query cut out of Path (its keys merged into Query) and every sensitive
// value in Extra replaced by Redacted.
func redact(r *Record) *Record {
	pathQuery := strings.IndexByte(r.Path, '?')
	needExtra := false
	for k, v := range r.Extra {
		if IsSensitiveName(k) || mentionsSensitive(v) {
			needExtra = true
			break
		}
	}
	if pathQuery < 0 && !needExtra {
		return r
	}
	c := *r
	if pathQuery >= 0 {
		q := RedactQuery(r.Path[pathQuery+1:])
		c.Path = r.Path[:pathQuery]
		merged := append(slices.Clone(r.Query), q...)
		slices.Sort(merged)
		c.Query = slices.Compact(merged)
	}
	if needExtra {
		c.Extra = make(map[string]json.RawMessage, len(r.Extra))
		for k, v := range r.Extra {
			switch {
			case IsSensitiveName(k):
				c.Extra[k] = json.RawMessage(`"` + Redacted + `"`)
			case mentionsSensitive(v):
				c.Extra[k] = redactRaw(v)
			default:
				c.Extra[k] = v
			}
		}
	}
	return &c
}

// redactRaw rewrites a JSON value so every object member with a sensitive name,
// at any depth, has the value Redacted. A value that is not valid JSON but
// mentions a sensitive name is replaced as a whole.
func redactRaw(raw json.RawMessage) json.RawMessage {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil || d.More() {
		return json.RawMessage(`"` + Redacted + `"`)
	}
	v = redactValue(v)
	out, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`"` + Redacted + `"`)
	}
	return out
}

func redactValue(v any) any {
	switch t := v.(type) {
	case string:
		if hasSensitiveHeaderLine(t) {
			return Redacted
		}
	case map[string]any:
		named := sensitiveField(t)
		for k, e := range t {
			switch lk := strings.ToLower(k); {
			case IsSensitiveName(k):
				t[k] = Redacted
			case named && (lk == "value" || lk == "values"):
				t[k] = Redacted
			default:
				t[k] = redactValue(e)
			}
		}
	case []any:
		for i := 0; i < len(t); i++ {
			e := t[i]
			// A header tuple such as ["Authorization", "Bearer x"] (or longer)
			// hides the name in a value: everything after the name goes.
			if tuple, ok := e.([]any); ok && len(tuple) >= 2 {
				if name, ok := tuple[0].(string); ok && IsSensitiveName(name) {
					for j := 1; j < len(tuple); j++ {
						tuple[j] = Redacted
					}
					continue
				}
			}
			// A flat list ["Authorization", "Bearer x", "Accept", "*/*"] (Node's
			// rawHeaders): the string after a sensitive name goes, unless it is a
			// name itself (a list of header names such as ["authorization", "cookie"]).
			if name, ok := e.(string); ok && IsSensitiveName(name) && i+1 < len(t) {
				if next, ok := t[i+1].(string); ok && !IsSensitiveName(next) {
					t[i+1] = Redacted
					i++
					continue
				}
			}
			t[i] = redactValue(e)
		}
	}
	return v
}

// hasSensitiveHeaderLine reports whether s holds a raw header line such as
// "Authorization: Bearer x" or "cookie=..." for a sensitive name.
func hasSensitiveHeaderLine(s string) bool {
	for line := range strings.FieldsFuncSeq(s, func(r rune) bool { return r == '\n' || r == '\r' }) {
		name, _, ok := strings.Cut(line, ":")
		if !ok {
			name, _, ok = strings.Cut(line, "=")
		}
		if ok && IsSensitiveName(name) {
			return true
		}
	}
	return false
}
