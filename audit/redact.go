package audit

import (
	"bytes"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
)

// Redacted replaces a credential value the writer refused to log.
const Redacted = "[REDACTED]"

// sensitiveNames are header names whose values never reach the audit file,
// wherever they appear in Extra (as a key at any depth, case-insensitively).
var sensitiveNames = [...]string{"authorization", "cookie", "set-cookie", "proxy-authorization"}

// IsSensitiveName reports whether a header or field name carries a credential whose
// value must never be logged: Authorization, Cookie, Set-Cookie,
// Proxy-Authorization, in any case, with "-" or "_" as separator.
func IsSensitiveName(name string) bool {
	n := strings.ToLower(strings.TrimSpace(name))
	n = strings.ReplaceAll(n, "_", "-")
	for _, s := range sensitiveNames {
		if n == s {
			return true
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
		for k, e := range t {
			if IsSensitiveName(k) {
				t[k] = Redacted
			} else {
				t[k] = redactValue(e)
			}
		}
	case []any:
		for i, e := range t {
			// A header list such as [["Authorization","Bearer x"]] or
			// [{"name":"Cookie","value":"..."}] hides the name in a value.
			if pair, ok := e.([]any); ok && len(pair) == 2 {
				if name, ok := pair[0].(string); ok && IsSensitiveName(name) {
					pair[1] = Redacted
					continue
				}
			}
			t[i] = redactValue(e)
		}
	}
	if m, ok := v.(map[string]any); ok {
		if name, ok := m["name"].(string); ok && IsSensitiveName(name) {
			for _, f := range []string{"value", "values"} {
				if _, ok := m[f]; ok {
					m[f] = Redacted
				}
			}
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
