package inspect

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// TestRules loads the embedded gitleaks rule set: every rule with a regexp
// and keywords compiles, the families issue 25 names are there, and each
// rule's confidence and reach are set. Run it after replacing
// rules/gitleaks.toml.
func TestRules(t *testing.T) {
	rs, err := defaultRules()
	if err != nil {
		t.Fatal(err)
	}
	ids := rs.ids()
	if len(ids) < 200 {
		t.Errorf("%d credential rules, want at least 200", len(ids))
	}
	for _, want := range []string{"aws-access-token", "gcp-api-key", "github-pat", "gitlab-pat", "slack-bot-token", "stripe-access-token",
		"private-key", "jwt", "openai-api-key", "anthropic-api-key", "npm-access-token", "generic-api-key"} {
		if !rs.known(want) {
			t.Errorf("rule %s missing", want)
		}
	}
	conf := map[string]int{}
	for _, r := range rs.rules {
		if len(r.keywords) == 0 || r.reach <= 0 || r.confidence == "" {
			t.Errorf("rule %s: keywords %v reach %d confidence %q", r.id, r.keywords, r.reach, r.confidence)
		}
		conf[r.confidence]++
	}
	t.Logf("%d rules (%d canary): confidence %v", len(rs.rules), len(rs.rules)-len(ids), conf)
	if got := rs.byID["generic-api-key"].confidence; got != Low {
		t.Errorf("generic-api-key confidence %s, want low", got)
	}
	if got := rs.byID["aws-access-token"].confidence; got != High {
		t.Errorf("aws-access-token confidence %s, want high", got)
	}
}

func TestParseRulesErrors(t *testing.T) {
	tests := []struct{ name, toml, want string }{
		{"bad toml", "[[rules]\nid=", "inspect: rules:"},
		{"bad regexp", "[[rules]]\nid = \"x\"\nregex = '''(['''\nkeywords = [\"x\"]\n", "x: error parsing regexp"},
		{"duplicate", "[[rules]]\nid = \"x\"\nregex = 'x'\nkeywords = [\"x\"]\n[[rules]]\nid = \"x\"\nregex = 'y'\nkeywords = [\"y\"]\n", "defined twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseRules(tc.toml)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestAssignFollows(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{`api_key = "sk3kd93kdk39dk3"`, true},
		{`"token": "abcdefghijklmnop"`, true},
		{`password=hunter2hunter2`, true},
		{`key := r.URL.Query()`, true}, // a superset: the regexp decides
		{`the key to success`, false},
		{`token: x`, false},
		{`secret`, false},
	}
	for _, tc := range tests {
		kw := []string{"key", "token", "password", "secret"}
		end := -1
		for _, k := range kw {
			if i := strings.Index(tc.in, k); i >= 0 {
				end = i + len(k)
				break
			}
		}
		if got := assignFollows([]byte(tc.in), end); got != tc.want {
			t.Errorf("assignFollows(%q): got %v, want %v", tc.in, got, tc.want)
		}
	}
}

// BenchmarkRuleCount scans one JSON body with the first 10, 50 and all
// rules: the keyword automaton makes the common case one pass, so the time
// stays flat as rules are added.
func BenchmarkRuleCount(b *testing.B) {
	full, err := defaultRules()
	if err != nil {
		b.Fatal(err)
	}
	var body strings.Builder
	body.WriteString(`{"model":"gpt-4o","messages":[`)
	for range 300 {
		body.WriteString(`{"role":"user","content":"Refactor the handler so the request context is passed down and errors are wrapped."},`)
	}
	body.WriteString(`{"role":"user","content":"done"}]}`)
	data := []byte(body.String())
	for _, n := range []int{10, 50, len(full.rules)} {
		b.Run(strconv.Itoa(n)+"-rules", func(b *testing.B) {
			rs := &ruleSet{rules: full.rules[:n], byID: map[string]*rule{}, global: full.global}
			for _, r := range rs.rules {
				rs.byID[r.id] = r
			}
			rs.build()
			s, err := New(Config{Key: []byte("0123456789abcdef0123")})
			if err != nil {
				b.Fatal(err)
			}
			c := compiledRules{rules: rs, enabled: make([]bool, n)}
			for i := range c.enabled {
				c.enabled[i] = true
			}
			s.compiled = func() compiledRules { return c }
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				s.Scan("body", data)
			}
		})
	}
}

// TestKeywordAtWordStart: the rules whose keyword hits may be dropped when
// glued to a word byte are those whose every match starts at `\b` with a
// keyword; a keyword inside the match, no `\b`, or a prefix no keyword
// covers keeps every hit. The real rules' vault token ("s.") is proved,
// and the dropped hit still finds the token where it stands alone.
func TestKeywordAtWordStart(t *testing.T) {
	for _, tc := range []struct {
		expr string
		kw   []string
		want bool
	}{
		{`\b((?:hvs\.[\w-]{90,120}|s\.(?i:[a-z0-9]{24})))(?:[\x60'"\s;]|\\[nr]|$)`, []string{"hvs.", "s."}, true},
		{`\b((?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16})\b`, []string{"a3t", "akia", "asia", "abia", "acca"}, true},
		{`\b((?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16})\b`, []string{"akia"}, false}, // A3T... starts with no keyword
		{`SK[0-9a-fA-F]{32}`, []string{"sk"}, false},                                       // no \b
		{`(?:^|[\s>=:(,)])([a-zA-Z0-9_~.]{3}\dQ~[a-zA-Z0-9_~.-]{31,34})`, []string{"q~"}, false},
		{`\b[a-z]{3}_key_[0-9]{8}`, []string{"_key_"}, false},     // keyword inside
		{`\b(ey[a-zA-Z0-9]{17,})`, []string{"e"}, true},           // a shorter keyword covers it
		{`\b-----BEGIN[ A-Z]+KEY`, []string{"-----begin"}, false}, // the boundary is before the '-'
		{`\b(?i:AKIA)[A-Z2-7]{16}`, []string{"akia"}, true},
	} {
		if got := keywordAtWordStart(tc.expr, tc.kw); got != tc.want {
			t.Errorf("keywordAtWordStart(%q, %q) = %v, want %v", tc.expr, tc.kw, got, tc.want)
		}
	}
	rs, err := defaultRules()
	if err != nil {
		t.Fatal(err)
	}
	if !rs.byID["vault-service-token"].wordStart || rs.byID["twilio-api-key"].wordStart || rs.byID["generic-api-key"].wordStart {
		t.Error("vault-service-token must be wordStart, twilio-api-key and generic-api-key not")
	}
	s, err := New(Config{Key: []byte("0123456789abcdef0123456789abcdef")})
	if err != nil {
		t.Fatal(err)
	}
	tok := "s.Xk3Jq9Lm2Np8Rs4Tv6Wy1Za5"
	for _, tc := range []struct {
		data string
		want bool
	}{{"VAULT_TOKEN=" + tok + "\n", true}, {"x (" + tok + ")\n", false}, {"reqs.Xk3Jq9Lm2Np8Rs4Tv6Wy1Za5\n", false}} {
		got := false
		for _, f := range s.Scan("body", []byte(tc.data)) {
			got = got || f.Detector == "vault-service-token"
		}
		if got != tc.want {
			t.Errorf("%q: vault-service-token found %v, want %v", tc.data, got, tc.want)
		}
	}
}

// TestAssignFollowsSuperset: for every "name = value" rule (both prefix
// forms), any text its regexp matches has a keyword hit that
// assignFollows accepts, and the text written backwards a reversed
// keyword hit that revAssignFollows accepts, so neither check hides a
// match. The inputs are
// built the way such a line is written: name, keyword in some case, name
// tail, quotes, operator, value, terminator.
func TestAssignFollowsSuperset(t *testing.T) {
	rs, err := defaultRules()
	if err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(3, 5))
	pick := func(s string, n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = s[rnd.IntN(len(s))]
		}
		return string(b)
	}
	const (
		lowerAlnum = "abcdefghijklmnopqrstuvwxyz0123456789"
		alnum      = lowerAlnum + "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
		hexLower   = "0123456789abcdef"
		token      = alnum + "_-="
	)
	ops := []string{"=", ">", ":=", "::=", ":::=", "||", ":", "=>", "?=", ","}
	ruleCount, matched := 0, 0
	for _, r := range rs.rules {
		if !r.assign {
			continue
		}
		ruleCount++
		hits := 0
		for iter := range 300 {
			k := r.keywords[iter%len(r.keywords)]
			switch iter % 3 {
			case 1:
				k = strings.ToUpper(k)
			case 2:
				k = strings.ToUpper(k[:1]) + k[1:]
			}
			alpha := []string{lowerAlnum, alnum, hexLower, token}[rnd.IntN(4)]
			val := pick(alpha, 8+rnd.IntN(64))
			if rnd.IntN(3) == 0 {
				val = pick(alpha, []int{12, 14, 20, 32, 36, 40, 42, 64}[rnd.IntN(8)])
			}
			if rnd.IntN(4) == 0 {
				// Values with a fixed prefix (okta's "00", sumo's "su").
				shape := []struct {
					prefix string
					n      int
				}{{"su", 12}, {"00", 40}, {"sk", 32}}[rnd.IntN(3)]
				val = shape.prefix + pick(alnum, shape.n)
			}
			in := pick(alnum+"_.-", rnd.IntN(8)) + k + pick(alnum+"_.- \t", rnd.IntN(21)) +
				pick(`'" `, rnd.IntN(4)) + ops[rnd.IntN(len(ops))] + pick("`'\" =", rnd.IntN(6)) +
				val + []string{"", "\"", "'", " ", ";", "\n", "`"}[rnd.IntN(7)]
			if !r.re.MatchString(in) {
				continue
			}
			hits++
			low := strings.ToLower(in)
			ok := false
			for _, kw := range r.keywords {
				for i := 0; !ok; {
					j := strings.Index(low[i:], kw)
					if j < 0 {
						break
					}
					ok = assignFollows([]byte(in), i+j+len(kw))
					i += j + 1
				}
			}
			if !ok {
				t.Errorf("%s matches %q but assignFollows refuses every keyword hit", r.id, in)
			}
			// The line written backwards: its reversed keyword hits, read
			// by revAssignFollows.
			rin := reverseString(in)
			rlow := strings.ToLower(rin)
			ok = false
			for _, kw := range r.keywords {
				rk := reverseString(kw)
				for i := 0; !ok; {
					j := strings.Index(rlow[i:], rk)
					if j < 0 {
						break
					}
					ok = revAssignFollows([]byte(rin), i+j)
					i += j + 1
				}
			}
			if !ok {
				t.Errorf("%s matches %q but revAssignFollows refuses it written backwards", r.id, in)
			}
		}
		if hits > 0 {
			matched++
		} else if strings.HasPrefix(r.re.String(), assignPrefixCased) {
			t.Errorf("%s: no generated line matched", r.id)
		}
	}
	t.Logf("%d assign rules, %d matched by generated lines", ruleCount, matched)
	if matched < ruleCount/2 {
		t.Errorf("only %d of %d assign rules matched a generated line: the generator misses their shape", matched, ruleCount)
	}
}

// TestRulesCompiledOnFirstUse: New leaves the rule set to the first scan,
// which finds a credential without Warm; a scanner whose rules did not
// compile refuses every scan with a malformed finding instead of passing
// the data unscanned (fail closed).
func TestRulesCompiledOnFirstUse(t *testing.T) {
	const key = "AKIAIOSFODNN7EXAMPL3" // aws-access-token's shape
	s, err := New(Config{Key: []byte("0123456789abcdef0123")})
	if err != nil {
		t.Fatal(err)
	}
	if fs := s.Scan("body", []byte("id="+key)); len(fs) == 0 || fs[0].Detector != "aws-access-token" {
		t.Errorf("first scan: got %v, want aws-access-token", fs)
	}
	if err := s.Warm(); err != nil {
		t.Errorf("Warm: got %v, want nil", err)
	}
	broken, err := New(Config{Key: []byte("0123456789abcdef0123")})
	if err != nil {
		t.Fatal(err)
	}
	broken.compiled = func() compiledRules { return compiledRules{err: errors.New("rules: broken")} }
	if err := broken.Warm(); err == nil {
		t.Error("Warm of broken rules: got nil, want the error")
	}
	for _, data := range []string{"id=" + key, "hello"} {
		fs := broken.Scan("body", []byte(data))
		if len(fs) != 1 || fs[0].Detector != DetectorMalformed || fs[0].Confidence != High {
			t.Errorf("broken rules, scan %q: got %v, want one high malformed finding", data, fs)
		}
	}
}
