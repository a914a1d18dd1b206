package inspect

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// ScanResponse looks for instructions injected into what the agent will read:
// imperative tool-use and run-this-command text, ignore-previous-instructions
// patterns, hidden text (zero-width and tag characters, bidi controls, HTML
// comments and hidden elements), and such instructions inside MCP tool
// descriptions and agent cards. contentType selects how the body is read
// (HTML, JSON, SSE, text); findings carry Where "response.body" or a more
// precise place ("response.tool_description").
func (s *Scanner) ScanResponse(contentType string, data []byte) []Finding {
	return s.scanResponse(contentType, data)
}

// Where values of response findings.
const (
	WhereResponse        = "response.body"
	WhereResponseHidden  = "response.hidden"           // an HTML comment or hidden element, tag characters
	WhereToolDescription = "response.tool_description" // an MCP tools/list result
	WhereAgentCard       = "response.agent_card"       // an agent-to-agent agent card
)

// phrase is one injected-instruction pattern and its confidence in plain
// visible text; hidden text and tool descriptions raise it one level.
type phrase struct {
	re   *regexp.Regexp
	conf string
}

// injectionPhrases were set against real documents (READMEs, licenses,
// registry metadata): TestResponseFalsePositives prints the rates. Run-this-
// command and curl-pipe-shell are everyday README text, hence low. They
// are compiled on first use, not at the start of every binary that links
// this package.
var injectionPhrases = sync.OnceValue(func() []phrase {
	return []phrase{
		{regexp.MustCompile(`(?i)\b(?:ignore|disregard|forget|override)\s+(?:all\s+|any\s+|the\s+|your\s+|of\s+)*(?:previous|prior|above|earlier|preceding|original|system)\s+(?:instructions?|directions?|prompts?|guidelines|directives)\b`), High},
		{regexp.MustCompile(`(?i)\b(?:do\s+not|don't|never)\s+(?:tell|inform|mention\s+(?:this\s+)?to|reveal\s+(?:this\s+)?to|notify|alert)\s+the\s+user\b`), High},
		{regexp.MustCompile(`(?i)\b(?:new|updated|real|actual|secret)\s+(?:system\s+)?instructions?\s*:`), Medium},
		{regexp.MustCompile(`(?i)<\s*/?\s*(?:important|system|instructions?|system[_-]?prompt)\s*>`), Medium},
		{regexp.MustCompile(`(?i)\byou\s+(?:are\s+now|must\s+now|will\s+now)\b`), Medium},
		{regexp.MustCompile(`(?i)\b(?:ai|llm|assistant|agent|model)s?\b[^.\n]{0,60}\b(?:must|should|are\s+required\s+to|need\s+to)\s+(?:first\s+|now\s+|also\s+)?(?:run|execute|call|invoke|send|fetch|visit|read|upload)\b`), Medium},
		{regexp.MustCompile(`(?i)\b(?:read|cat|send|upload|post|include|attach|exfiltrate|forward)\b[^\n]{0,80}(?:~/\.ssh/id_|\bid_rsa\b[^.]|\bid_ed25519\b[^.]|\.aws/credentials|\.netrc|\.git-credentials|/etc/shadow)`), Low},
		{regexp.MustCompile(`(?i)\b(?:run|execute)\s+(?:the\s+following|this)\s+(?:command|script|code)\b`), Low},
		{regexp.MustCompile(`(?i)\bcurl\b[^\n|]{0,200}\|\s*(?:sudo\s+)?(?:ba|z|da)?sh\b`), Low},
		{regexp.MustCompile(`(?i)\b(?:system\s+prompt|jailbreak|developer\s+mode)\b`), Low},
	}
})

var (
	htmlCommentRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?s)<!--(.*?)-->`) })
	hiddenElemRE  = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(?is)<([a-z][a-z0-9]*)\b[^>]*(?:style\s*=\s*["'][^"']*(?:display\s*:\s*none|visibility\s*:\s*hidden|font-size\s*:\s*0(?:px)?\s*[;"']|opacity\s*:\s*0(?:\.0+)?\s*[;"'])|\shidden[\s>=])[^>]*>(.*?)</\s*([a-z][a-z0-9]*)\s*>`)
	})
)

func raise(c string) string {
	if c == Low {
		return Medium
	}
	return High
}

func (s *Scanner) scanResponse(contentType string, data []byte) []Finding {
	st := s.newState(WhereResponse)
	if len(data) > s.cfg.MaxBytes {
		st.add(hit{Finding: Finding{Detector: DetectorOversize, Class: ClassOversize, Where: WhereResponse, Confidence: High}, pos: -1})
		data = data[:s.cfg.MaxBytes]
	}
	mt, _, _ := strings.Cut(strings.ToLower(contentType), ";")
	mt = strings.TrimSpace(mt)
	st.hiddenChars(data)
	st.phrases(data, WhereResponse, false)
	switch {
	case strings.Contains(mt, "html") || mt == "" && bytes.Contains(data, []byte("<!--")):
		st.html(data)
	case strings.Contains(mt, "json"):
		st.jsonResponse(data)
	case mt == "text/event-stream":
		for _, ev := range sseData(data) {
			st.jsonResponse(ev)
		}
	}
	return st.findings()
}

// phrases reports each injection pattern in text once.
func (st *scanState) phrases(text []byte, where string, hidden bool) {
	lower := gateText(text)
	for i, p := range injectionPhrases() {
		if !phraseMayMatch(i, lower) {
			continue
		}
		loc := p.re.FindIndex(text)
		if loc == nil {
			continue
		}
		conf := p.conf
		if hidden {
			conf = raise(conf)
		}
		det := DetectorInjection
		if where == WhereToolDescription || where == WhereAgentCard {
			det = DetectorToolPoison
		}
		st.add(hit{Finding: Finding{Detector: det, Class: ClassInjection, Where: where, Confidence: conf,
			Fingerprint: st.s.fingerprint([]byte("phrase:" + strconv.Itoa(i) + ":" + strings.ToLower(string(text[loc[0]:loc[1]]))))}, pos: -1})
	}
}

// hiddenChars reports Unicode tag characters (text an agent reads and a
// person does not see), runs of zero-width characters, and bidi overrides.
func (st *scanState) hiddenChars(data []byte) {
	var tags []byte
	zwRun, zwMax, bidi := 0, 0, 0
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		i += n
		switch {
		case r >= 0xE0000 && r <= 0xE007F:
			if r >= 0xE0020 && r <= 0xE007E {
				tags = append(tags, byte(r-0xE0000))
			}
			zwRun = 0
			continue
		case r == 0x200B || r == 0x200C || r == 0x200D || r >= 0x2060 && r <= 0x2064 || r == 0xFEFF && i > n:
			zwRun++
			zwMax = max(zwMax, zwRun)
			continue
		case r >= 0x202A && r <= 0x202E || r >= 0x2066 && r <= 0x2069:
			bidi++
		}
		zwRun = 0
	}
	f := func(conf string, fp string) {
		st.add(hit{Finding: Finding{Detector: DetectorHiddenText, Class: ClassInjection, Where: WhereResponseHidden, Confidence: conf, Fingerprint: st.s.fingerprint([]byte(fp))}, pos: -1})
	}
	if len(tags) >= 4 {
		f(High, "tags:"+string(tags))
		st.phrases(tags, WhereResponseHidden, true)
	}
	if zwMax >= 4 {
		f(Medium, "zero-width")
	}
	if bidi > 0 {
		f(Low, "bidi")
	}
}

// html scans comments and hidden elements as hidden text.
func (st *scanState) html(data []byte) {
	for _, m := range htmlCommentRE().FindAllSubmatch(data, 256) {
		st.phrases(m[1], WhereResponseHidden, true)
	}
	for _, m := range hiddenElemRE().FindAllSubmatch(data, 256) {
		st.phrases(m[2], WhereResponseHidden, true)
	}
}

// jsonResponse reads MCP tool descriptions and agent cards out of a JSON
// body and scans them as the instructions an agent will follow.
func (st *scanState) jsonResponse(data []byte) {
	lim := Limits{}.withDefaults()
	if checkJSON(data, lim) != nil {
		return
	}
	var v any
	if json.Unmarshal(data, &v) != nil {
		return
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return
	}
	if res, ok := obj["result"].(map[string]any); ok {
		if tools, ok := res["tools"].([]any); ok {
			for _, t := range tools {
				var b strings.Builder
				descriptions(t, &b, 0)
				st.phrases([]byte(b.String()), WhereToolDescription, true)
			}
		}
	}
	_, skills := obj["skills"].([]any)
	_, name := obj["name"].(string)
	if skills && name {
		var b strings.Builder
		descriptions(obj, &b, 0)
		st.phrases([]byte(b.String()), WhereAgentCard, true)
	}
}

// descriptions gathers every "description" (and "title") string below v.
func descriptions(v any, b *strings.Builder, depth int) {
	if depth > 32 || b.Len() > 1<<20 {
		return
	}
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && (k == "description" || k == "title") {
				b.WriteString(s)
				b.WriteString("\n")
				continue
			}
			descriptions(e, b, depth+1)
		}
	case []any:
		for _, e := range x {
			descriptions(e, b, depth+1)
		}
	}
}

// sseData returns each event's data (its data: lines joined).
func sseData(data []byte) [][]byte {
	var out [][]byte
	var cur []byte
	for _, line := range bytes.Split(data, []byte("\n")) {
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) == 0 {
			if cur != nil {
				out = append(out, cur)
				cur = nil
			}
			continue
		}
		if d, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			if cur != nil {
				cur = append(cur, '\n')
			}
			cur = append(cur, bytes.TrimPrefix(d, []byte(" "))...)
		}
	}
	if cur != nil {
		out = append(out, cur)
	}
	return out
}
