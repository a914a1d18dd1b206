package inspecttest

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/airlock-dev/airlock/inspect"
)

// chunk is the write size Evaluate streams bodies in, small enough that
// most secrets straddle a boundary somewhere in the corpus.
const chunk = 1000

// Evaluate runs a case through the scanner the way the gateway's inspection
// stage does: the URL path and query, headers as fields, the body streamed
// and (JSON) by string leaves, frames and messages as fields, consecutive
// requests through the sandbox's window, the question name, the response.
func Evaluate(s *inspect.Scanner, c Case) []inspect.Finding {
	var out []inspect.Finding
	if c.Transport == DNS {
		return s.Scan(inspect.WhereDNS, []byte(c.Host))
	}
	if c.Transport == Response {
		return s.ScanResponse(c.ContentType, c.Response)
	}
	path, rawQuery, _ := strings.Cut(c.Path, "?")
	out = append(out, s.Scan(inspect.WherePath, []byte(path))...)
	if rawQuery != "" {
		var fields []inspect.Field
		q, err := url.ParseQuery(rawQuery)
		if err != nil {
			out = append(out, inspect.MalformedFinding("url.query", err))
		}
		for _, kv := range strings.Split(rawQuery, "&") {
			k, _, _ := strings.Cut(kv, "=")
			name, _ := url.QueryUnescape(k)
			for _, v := range q[name] {
				fields = append(fields, inspect.Field{Where: "url.query", Name: name, Value: []byte(v)})
			}
			delete(q, name)
		}
		out = append(out, s.ScanFields(fields)...)
	}
	var hf []inspect.Field
	for _, h := range c.Headers {
		hf = append(hf, inspect.Field{Where: "header:" + strings.ToLower(h[0]), Name: h[0], Value: []byte(h[1])})
	}
	out = append(out, s.ScanFields(hf)...)
	if len(c.Body) > 0 {
		st := s.NewStream("body")
		for b := c.Body; len(b) > 0; {
			n := min(chunk, len(b))
			st.Write(b[:n])
			b = b[n:]
		}
		st.Close()
		out = append(out, st.Findings()...)
		if c.contentType() == "application/json" {
			fields, err := inspect.JSONFields("body", c.Body, inspect.Limits{})
			if err != nil {
				out = append(out, inspect.MalformedFinding("body", err))
			}
			out = append(out, s.ScanFields(fields)...)
		}
		if c.Transport == JSONRPC || c.Transport == A2A {
			rpc, err := inspect.ParseJSONRPC(c.Body, inspect.Limits{})
			if err != nil {
				out = append(out, inspect.MalformedFinding("jsonrpc", err))
			} else {
				for _, m := range rpc.Messages {
					out = append(out, s.ScanFields(m.Fields())...)
				}
			}
		}
	}
	switch c.Transport {
	case WS, GRPC:
		var fs []inspect.Field
		for _, p := range c.Pieces {
			if c.Transport == GRPC && len(p) >= 5 {
				p = p[5:] // the gateway splits the length-prefixed messages
			}
			fs = append(fs, inspect.Field{Where: c.Transport, Value: p})
		}
		out = append(out, s.ScanFields(fs)...)
	case Requests:
		w := s.Window("corpus:" + c.Name)
		for _, p := range c.Pieces {
			f := []inspect.Field{{Where: "body", Value: p}}
			out = append(out, s.ScanFields(f)...)
			out = append(out, w.Add(f)...)
		}
	}
	return out
}

func (c Case) contentType() string {
	for _, h := range c.Headers {
		if strings.EqualFold(h[0], "Content-Type") {
			return h[1]
		}
	}
	return ""
}

// Blocks reports whether the default policy blocks on findings: every
// canary, every high-confidence credential.
func Blocks(fs []inspect.Finding) bool {
	for _, f := range fs {
		if f.Class == inspect.ClassCanary || f.Class == inspect.ClassCredential && f.Confidence == inspect.High {
			return true
		}
	}
	return false
}

// Flags reports whether any finding is above low confidence.
func Flags(fs []inspect.Finding) bool {
	for _, f := range fs {
		if f.Confidence != inspect.Low {
			return true
		}
	}
	return false
}

// Found reports whether a finding of class is among fs.
func Found(fs []inspect.Finding, class string) bool {
	for _, f := range fs {
		if f.Class == class {
			return true
		}
	}
	return false
}

// Result is a case and what the scanner made of it.
type Result struct {
	Case     Case
	Findings []inspect.Finding
}

// OK reports whether the result meets the case's expectation.
func (r Result) OK() bool {
	switch r.Case.Expect {
	case ExpectBlock:
		return Blocks(r.Findings) && (Found(r.Findings, r.Case.Class) || r.Case.Class == "")
	case ExpectDetect:
		return Found(r.Findings, r.Case.Class)
	}
	return !Blocks(r.Findings) && !Flags(r.Findings)
}

// Rates summarizes results: blocked among block attacks, detected among all
// attacks, blocked and flagged among benign cases.
type Rates struct {
	BlockAttacks, Blocked int
	Attacks, Detected     int
	Benign, BenignBlocked int
	BenignFlagged         int
}

// Tally counts results.
func Tally(rs []Result) Rates {
	var t Rates
	for _, r := range rs {
		c := r.Case
		switch {
		case c.Attack():
			t.Attacks++
			if Found(r.Findings, c.Class) {
				t.Detected++
			}
			if c.Expect == ExpectBlock {
				t.BlockAttacks++
				if Blocks(r.Findings) {
					t.Blocked++
				}
			}
		default:
			t.Benign++
			if Blocks(r.Findings) {
				t.BenignBlocked++
			}
			if Flags(r.Findings) {
				t.BenignFlagged++
			}
		}
	}
	return t
}

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func (t Rates) String() string {
	return fmt.Sprintf("attacks blocked %d/%d (%.1f%%), attacks detected %d/%d (%.1f%%), benign blocked %d/%d (%.1f%%), benign flagged above low %d/%d (%.1f%%)",
		t.Blocked, t.BlockAttacks, pct(t.Blocked, t.BlockAttacks), t.Detected, t.Attacks, pct(t.Detected, t.Attacks),
		t.BenignBlocked, t.Benign, pct(t.BenignBlocked, t.Benign), t.BenignFlagged, t.Benign, pct(t.BenignFlagged, t.Benign))
}
