package audit

import "strconv"

// Finding is one content-inspection finding on a record (Record.Findings):
// which detector found what kind of thing where, through which decoding, how
// sure it is, and a keyed fingerprint of the value. Never the value itself.
type Finding struct {
	Detector    string  `json:"detector"`
	Class       string  `json:"class"`
	Where       string  `json:"where"`
	Encoding    string  `json:"encoding,omitempty"`
	Confidence  string  `json:"confidence"`
	Score       float64 `json:"score,omitempty"`
	Fingerprint string  `json:"fingerprint,omitempty"`
	Split       bool    `json:"split,omitempty"`
}

// Finding classes that mean certain or likely exfiltration (the report and
// audit query count these apart).
const (
	FindingClassCredential = "credential"
	FindingClassCanary     = "canary"
)

// appendFindings encodes r's findings as the "findings" field.
func appendFindings(dst []byte, fs []Finding) []byte {
	if len(fs) == 0 {
		return dst
	}
	dst = append(dst, `,"findings":[`...)
	for i := range fs {
		f := &fs[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"detector":`...)
		dst = appendString(dst, f.Detector)
		dst = append(dst, `,"class":`...)
		dst = appendString(dst, f.Class)
		dst = append(dst, `,"where":`...)
		dst = appendString(dst, f.Where)
		dst = appendStrField(dst, `,"encoding":`, f.Encoding)
		dst = append(dst, `,"confidence":`...)
		dst = appendString(dst, f.Confidence)
		dst = appendFloatField(dst, `,"score":`, f.Score)
		dst = appendStrField(dst, `,"fingerprint":`, f.Fingerprint)
		if f.Split {
			dst = append(dst, `,"split":true`...)
		}
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

// shrinkFindings keeps at most n findings with their text cut by cut.
func shrinkFindings(fs []Finding, n int, cut func(string) string) []Finding {
	fs = fs[:min(len(fs), n)]
	out := make([]Finding, len(fs))
	for i, f := range fs {
		out[i] = Finding{Detector: cut(f.Detector), Class: cut(f.Class), Where: cut(f.Where), Encoding: cut(f.Encoding),
			Confidence: cut(f.Confidence), Score: f.Score, Fingerprint: cut(f.Fingerprint), Split: f.Split}
	}
	return out
}

// FindingsAny is Filter.Findings matching every record with a finding.
const FindingsAny = "any"

// matchFindings reports whether r has a finding f.Findings asks for.
func (f *Filter) matchFindings(r *Record) bool {
	if f.Findings == "" {
		return true
	}
	for i := range r.Findings {
		x := &r.Findings[i]
		if f.Findings == FindingsAny || x.Class == f.Findings || x.Detector == f.Findings {
			return true
		}
	}
	return false
}

// FindingsText is a record's findings in one short cell: detector@where for
// each (with +encoding and "split"), at most four, then how many more.
func FindingsText(r *Record) string {
	var b []byte
	for i := range r.Findings {
		if i == 4 {
			b = append(b, " (+"...)
			b = strconv.AppendInt(b, int64(len(r.Findings)-4), 10)
			b = append(b, " more)"...)
			break
		}
		x := &r.Findings[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, x.Detector...)
		b = append(b, '@')
		b = append(b, x.Where...)
		if x.Encoding != "" {
			b = append(b, '+')
			b = append(b, x.Encoding...)
		}
		if x.Split {
			b = append(b, "+split"...)
		}
	}
	return string(b)
}
