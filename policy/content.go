package policy

import (
	"encoding/json"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/util"
)

// Content is what content inspection found in a request (input.content):
// the findings of every detector that looked at its URL, headers and body.
// A finding names the detector, where and how it was found, never the value.
// The library's content rules (policies/lib/content.rego) deny credential
// and canary findings to every destination unless a policy turns a
// detector off by name (data.airlock.content.disabled).
type Content struct {
	Findings []Finding `json:"findings"`
	// Partial: the body was still streaming when this decision was asked;
	// findings may follow (the gateway asks again before its last bytes leave).
	Partial bool `json:"partial,omitempty"`
}

// Finding is one detector's finding (package inspect's Finding, which policy
// does not import).
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

// JSONRPC is a JSON-RPC request's view (input.jsonrpc): MCP's streamable
// HTTP transport and agent-to-agent messages. Method, ID, Tool and Arguments
// are the first message's; Messages holds every message of a batch, so a
// rule over them cannot be walked around by batching.
type JSONRPC struct {
	Method    string           `json:"method"`
	ID        string           `json:"id,omitempty"`
	Tool      string           `json:"tool,omitempty"`
	Arguments map[string]any   `json:"arguments,omitempty"`
	Parts     []map[string]any `json:"parts,omitempty"`
	Batch     bool             `json:"batch,omitempty"`
	Messages  []JSONRPCMessage `json:"messages,omitempty"`
}

// JSONRPCMessage is one message of a JSON-RPC batch.
type JSONRPCMessage struct {
	Method string `json:"method,omitempty"`
	ID     string `json:"id,omitempty"`
	Tool   string `json:"tool,omitempty"`
}

// LLM is a request to an LLM API (input.llm): OpenAI-, Anthropic- or
// Gemini-shaped, by host and path.
type LLM struct {
	Provider  string `json:"provider"`
	Model     string `json:"model"`
	Stream    bool   `json:"stream"`
	Operation string `json:"operation,omitempty"`
}

// contentValues appends input.content, input.jsonrpc and input.llm, when
// present and read by the policy, to items. They are rare (a request with
// findings, a JSON-RPC or LLM call) and nested, so they go through their JSON
// encoding.
func contentValues(in *Input, f *inputFields, items [][2]*ast.Term) [][2]*ast.Term {
	for _, p := range [...]struct {
		key  string
		used bool
		v    any
		nil_ bool
	}{
		{"content", f.content, in.Content, in.Content == nil},
		{"jsonrpc", f.jsonrpc, in.JSONRPC, in.JSONRPC == nil},
		{"llm", f.llm, in.LLM, in.LLM == nil},
	} {
		if p.nil_ || !p.used {
			continue
		}
		items = append(items, item(p.key, ast.NewTerm(jsonValue(p.v))))
	}
	return items
}

// jsonValue is v's JSON encoding as an OPA value; an error (never expected of
// these types) yields an object that says so, which no rule matches as a
// finding, and is caught by the tests.
func jsonValue(v any) ast.Value {
	b, err := json.Marshal(v)
	if err == nil {
		var x any
		if err = util.UnmarshalJSON(b, &x); err == nil {
			var val ast.Value
			if val, err = ast.InterfaceToValue(x); err == nil {
				return val
			}
		}
	}
	return ast.NewObject(item("error", ast.StringTerm(err.Error())))
}

// contentKey adds the content parts to a decision cache key: their JSON
// encoding (struct fields in order, map keys sorted), length prefixed.
func contentKey(b *keyBuilder, in *Input) {
	for _, v := range [...]any{in.Content, in.JSONRPC, in.LLM} {
		switch x := v.(type) {
		case *Content:
			if x == nil {
				b.tag('-')
				continue
			}
		case *JSONRPC:
			if x == nil {
				b.tag('-')
				continue
			}
		case *LLM:
			if x == nil {
				b.tag('-')
				continue
			}
		}
		j, err := json.Marshal(v)
		if err != nil {
			j = []byte(err.Error())
		}
		b.tag('c')
		b.str(string(j))
	}
}
