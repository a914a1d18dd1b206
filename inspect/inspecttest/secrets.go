package inspecttest

import (
	"encoding/base64"
	"math/rand/v2"
	"strings"
)

// gen makes format-valid fake credentials, the same ones on every run.
type gen struct{ r *rand.Rand }

func newGen(seed uint64) *gen { return &gen{rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))} }

const (
	upper32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
	alnum   = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	lowerAl = "abcdefghijklmnopqrstuvwxyz0123456789"
	letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	digits  = "0123456789"
	urlB64  = alnum + "-_"
)

func (g *gen) pick(alphabet string, n int) string {
	var b strings.Builder
	for range n {
		b.WriteByte(alphabet[g.r.IntN(len(alphabet))])
	}
	return b.String()
}

// Secret is one fake credential and the rule that must find it.
type Secret struct {
	Kind  string // the gitleaks rule id
	Value string
	Block bool // the default policy blocks it (a high-confidence rule)
}

func (g *gen) secrets() []Secret {
	pem := "-----BEGIN RSA PRIVATE KEY-----\n"
	raw := make([]byte, 600)
	for i := range raw {
		raw[i] = byte(g.r.IntN(256))
	}
	enc := base64.StdEncoding.EncodeToString(raw)
	for len(enc) > 64 {
		pem += enc[:64] + "\n"
		enc = enc[64:]
	}
	pem += enc + "\n-----END RSA PRIVATE KEY-----\n"
	header := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	claims := base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"` + g.pick(lowerAl, 12) + `","iat":1700000000}`))
	return []Secret{
		{"aws-access-token", "AKIA" + g.pick(upper32, 16), true},
		{"github-pat", "ghp_" + g.pick(alnum, 36), true},
		{"github-fine-grained-pat", "github_pat_" + g.pick(alnum+"_", 82), true},
		{"gitlab-pat", "glpat-" + g.pick(alnum, 20), true},
		{"slack-bot-token", "xoxb-" + g.pick(digits, 12) + "-" + g.pick(digits, 13) + "-" + g.pick(alnum, 24), true},
		{"stripe-access-token", "sk_live_" + g.pick(alnum, 32), true},
		{"openai-api-key", "sk-proj-" + g.pick(urlB64, 74) + "T3BlbkFJ" + g.pick(urlB64, 74), true},
		{"anthropic-api-key", "sk-ant-api03-" + g.pick(urlB64, 93) + "AA", true},
		{"gcp-api-key", "AIza" + g.pick(alnum+"_-", 35), true},
		{"npm-access-token", "npm_" + g.pick(alnum, 36), true},
		{"huggingface-access-token", "hf_" + g.pick(letters, 34), true},
		{"private-key", pem, true},
		{"jwt", header + "." + claims + "." + g.pick(urlB64, 43), false},
	}
}
