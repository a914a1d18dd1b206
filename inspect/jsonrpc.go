package inspect

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
