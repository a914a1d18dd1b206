package inspect

import (
	"sort"
	"strconv"
)

// JSONRPC is a parsed JSON-RPC 2.0 request or batch (MCP streamable HTTP,
// agent-to-agent). Messages has one entry per message, in order; a single
// message is a batch of one, so a rule over Messages cannot be walked around
// by batching.
type JSONRPC struct {
	Batch    bool      `json:"batch"`
	Messages []Message `json:"messages"`
}

// Message is one JSON-RPC message.
type Message struct {
	Method string `json:"method,omitempty"` // "" for a response
	ID     string `json:"id,omitempty"`     // the id as JSON text ("1", "\"abc\""); "" for a notification
	// Tool and Arguments are an MCP tools/call's params.name and
	// params.arguments (strings cut to Limits.MaxString, at most
	// Limits.MaxItems keys).
	Tool      string         `json:"tool,omitempty"`
	Arguments map[string]any `json:"arguments,omitempty"`
	// Parts are an agent-to-agent message's parts (message/send,
	// message/stream, tasks/send).
	Parts []Part `json:"parts,omitempty"`
	// Response reports a response message (result or error, no method).
	Response bool `json:"response,omitempty"`
}

// Part is one part of an agent-to-agent message.
type Part struct {
	Kind     string `json:"kind"`               // "text", "file", "data"
	Text     string `json:"text,omitempty"`     // text part, cut to Limits.MaxString
	MimeType string `json:"mimeType,omitempty"` // file part
	URI      string `json:"uri,omitempty"`      // file part by reference
	Bytes    int    `json:"bytes,omitempty"`    // file part inline: its base64 length
}

// ParseJSONRPC parses a JSON-RPC 2.0 request body, single or batch, within
// lim. Anything that is not JSON-RPC 2.0, is nested deeper or is larger than
// lim allows is an error wrapping ErrMalformed.
func ParseJSONRPC(body []byte, lim Limits) (*JSONRPC, error) {
	return parseJSONRPC(body, lim.withDefaults())
}

// Fields returns the message's content as fields for ScanFields: the tool
// arguments' strings (keys in sorted order, nested values in order) and the
// parts' texts, so a secret split across two arguments or two parts joins
// up. Where is "jsonrpc.params".
func (m Message) Fields() []Field {
	var out []Field
	var walk func(name string, v any)
	walk = func(name string, v any) {
		switch x := v.(type) {
		case string:
			out = append(out, Field{Where: WhereJSONRPC, Name: name, Value: []byte(x)})
		case map[string]any:
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				walk(name+"."+k, x[k])
			}
		case []any:
			for i, e := range x {
				walk(name+"["+strconv.Itoa(i)+"]", e)
			}
		}
	}
	walk("arguments", m.Arguments)
	for i, p := range m.Parts {
		if p.Text != "" {
			out = append(out, Field{Where: WhereJSONRPC, Name: "parts[" + strconv.Itoa(i) + "]", Value: []byte(p.Text)})
		}
	}
	return out
}

// WhereJSONRPC is the Where of a JSON-RPC message's fields.
const WhereJSONRPC = "jsonrpc.params"
