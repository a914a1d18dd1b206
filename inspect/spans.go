package inspect

import (
	"bytes"
	"encoding/json"
	"sort"
	"strings"
	"unicode/utf8"
)

// Stripped is one span StripResponse removed: the detector whose finding
// names it and where it was, never the text. Offset is in the body given to
// StripResponse; inside a JSON string it is the offset of that string
// literal, and Length counts the decoded bytes removed from it.
type Stripped struct {
	Detector string `json:"detector"`
	Offset   int    `json:"offset"`
	Length   int    `json:"length"`
}

// maxStripSpans bounds the spans one StripResponse call reports (it removes
// every span it finds; past this many only the count of the rest grows in
// the last one's Length).
const maxStripSpans = 64

// StripResponse returns a response body without what the response
// detectors flag, for a policy that strips a response rather than blocking
// it: hidden text (tag characters, zero-width runs, bidi controls; in HTML,
// comments and hidden elements whole) and the injected-instruction phrases
// ScanResponse matches with medium or high confidence in plain text (the
// low ones, "run the following command" and curl piped to a shell, are
// everyday README text: they stay, and a policy that must not let them
// through blocks instead). A JSON body stays JSON: each
// string value is decoded, stripped and encoded again, the rest is kept
// byte for byte. An SSE event's data lines are each read as JSON when they
// parse and as text otherwise. Visible text other than the matched phrases
// is untouched. The spans removed come back in order, at most
// maxStripSpans; data is not modified.
func StripResponse(contentType string, data []byte) ([]byte, []Stripped) {
	mt, _, _ := strings.Cut(strings.ToLower(contentType), ";")
	mt = strings.TrimSpace(mt)
	var sp spanList
	var out []byte
	switch {
	case mt == "text/event-stream":
		out = stripSSE(data, &sp)
	case strings.Contains(mt, "json"):
		out = stripJSON(data, 0, &sp)
	default:
		out = stripText(data, 0, strings.Contains(mt, "html") || mt == "" && bytes.Contains(data, []byte("<!--")), &sp)
	}
	if len(sp.spans) == 0 {
		return data, nil
	}
	return out, sp.spans
}

// spanList gathers what was stripped, bounded.
type spanList struct {
	spans []Stripped
	n     int // spans added, past the bound too
}

func (l *spanList) add(s Stripped) {
	l.n++
	if len(l.spans) == maxStripSpans {
		l.spans[len(l.spans)-1].Length += s.Length
		return
	}
	l.spans = append(l.spans, s)
}

// stripSpan is a byte range of text and the detector that flags it.
type stripSpan struct {
	start, end int
	det        string
}

// textSpans finds the spans of text to remove: hidden characters, HTML
// comments and hidden elements (html), and injection phrases.
func textSpans(text []byte, html bool) []stripSpan {
	var out []stripSpan
	if html {
		for _, m := range htmlCommentRE().FindAllIndex(text, -1) {
			out = append(out, stripSpan{m[0], m[1], DetectorHiddenText})
		}
		for _, m := range hiddenElemRE().FindAllIndex(text, -1) {
			out = append(out, stripSpan{m[0], m[1], DetectorHiddenText})
		}
	}
	for i := 0; i < len(text); {
		r, n := utf8.DecodeRune(text[i:])
		if !hiddenRune(r) || r == 0x200D && loneJoiner(text, i, n) {
			i += n
			continue
		}
		j := i + n
		for j < len(text) {
			r, m := utf8.DecodeRune(text[j:])
			if !hiddenRune(r) {
				break
			}
			j += m
		}
		out = append(out, stripSpan{i, j, DetectorHiddenText})
		i = j
	}
	lower := gateText(text)
	for i, p := range injectionPhrases() {
		if p.conf == Low {
			continue // everyday README text ("run the following command", curl | sh)
		}
		if !phraseMayMatch(i, lower) {
			continue
		}
		for _, m := range p.re.FindAllIndex(text, -1) {
			out = append(out, stripSpan{m[0], m[1], DetectorInjection})
		}
	}
	return mergeSpans(out)
}

// mergeSpans sorts spans and joins those that overlap (the first one's
// detector names the union); adjacent spans stay apart.
func mergeSpans(s []stripSpan) []stripSpan {
	if len(s) < 2 {
		return s
	}
	sort.SliceStable(s, func(i, j int) bool { return s[i].start < s[j].start })
	out := s[:1]
	for _, x := range s[1:] {
		last := &out[len(out)-1]
		if x.start < last.end {
			last.end = max(last.end, x.end)
			continue
		}
		out = append(out, x)
	}
	return out
}

// stripText removes text's spans; base is text's offset in the body.
func stripText(text []byte, base int, html bool, sp *spanList) []byte {
	spans := textSpans(text, html)
	if len(spans) == 0 {
		return text
	}
	out := make([]byte, 0, len(text))
	at := 0
	for _, s := range spans {
		out = append(out, text[at:s.start]...)
		sp.add(Stripped{Detector: s.det, Offset: base + s.start, Length: s.end - s.start})
		at = s.end
	}
	return append(out, text[at:]...)
}

// stripJSON strips inside every string value of a JSON document (keys stay),
// keeping the bytes between them; a body that is not valid JSON is
// stripped as text. base is data's offset in the body.
func stripJSON(data []byte, base int, sp *spanList) []byte {
	if !json.Valid(data) {
		return stripText(data, base, false, sp)
	}
	var out []byte
	at := 0
	for i := 0; i < len(data); i++ {
		if data[i] != '"' {
			continue
		}
		end := stringEnd(data, i)
		if isKey(data, end) {
			i = end - 1
			continue
		}
		lit := data[i:end]
		var s string
		if json.Unmarshal(lit, &s) == nil {
			var inner spanList
			stripped := stripText([]byte(s), 0, false, &inner)
			if inner.n > 0 {
				for _, x := range inner.spans {
					sp.add(Stripped{Detector: x.Detector, Offset: base + i, Length: x.Length})
				}
				out = append(out, data[at:i]...)
				out = append(out, encodeString(stripped)...)
				at = end
			}
		}
		i = end - 1
	}
	if out == nil {
		return data
	}
	return append(out, data[at:]...)
}

// stringEnd returns the offset just past the JSON string literal that
// starts at data[i] (a quote); data is valid JSON.
func stringEnd(data []byte, i int) int {
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(data)
}

// isKey reports whether the literal ending at end is an object key (a colon
// follows it).
func isKey(data []byte, end int) bool {
	for ; end < len(data); end++ {
		switch data[end] {
		case ' ', '\t', '\r', '\n':
			continue
		case ':':
			return true
		}
		return false
	}
	return false
}

// encodeString is s as a JSON string literal, <, > and & left as they are.
func encodeString(s []byte) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(string(s))
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// stripSSE strips each data line of an event stream (JSON when the line's
// value is JSON, text otherwise); other lines are kept.
func stripSSE(data []byte, sp *spanList) []byte {
	var out []byte
	changed := false
	for at := 0; at < len(data); {
		nl := bytes.IndexByte(data[at:], '\n')
		end := len(data)
		if nl >= 0 {
			end = at + nl + 1
		}
		line := data[at:end]
		if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			body := bytes.TrimRight(v, "\r\n")
			lead := len("data:")
			if len(body) > 0 && body[0] == ' ' {
				body, lead = body[1:], lead+1
			}
			n := sp.n
			var s []byte
			if t := bytes.TrimSpace(body); len(t) > 0 && (t[0] == '{' || t[0] == '[') && json.Valid(t) {
				s = stripJSON(body, at+lead, sp)
			} else {
				s = stripText(body, at+lead, false, sp)
			}
			if sp.n != n {
				changed = true
				line = append(append(append([]byte(nil), line[:lead]...), s...), line[lead+len(body):]...)
			}
		}
		out = append(out, line...)
		at = end
	}
	if !changed {
		return data
	}
	return out
}
