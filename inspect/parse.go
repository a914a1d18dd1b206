package inspect

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// checkJSON refuses a body over lim's size or nesting before any decoder
// sees it.
func checkJSON(body []byte, lim Limits) error {
	if len(body) > lim.MaxBytes {
		return fmt.Errorf("%w: body is %d bytes, over the %d-byte limit", ErrMalformed, len(body), lim.MaxBytes)
	}
	depth, inStr, esc := 0, false, false
	for _, c := range body {
		switch {
		case inStr:
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == '{' || c == '[':
			depth++
			if depth > lim.MaxDepth {
				return fmt.Errorf("%w: JSON nested deeper than %d", ErrMalformed, lim.MaxDepth)
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	if !json.Valid(body) {
		return fmt.Errorf("%w: not valid JSON", ErrMalformed)
	}
	return nil
}

type rawMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	Method  *string         `json:"method"`
	ID      json.RawMessage `json:"id"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   json.RawMessage `json:"error"`
}

func parseJSONRPC(body []byte, lim Limits) (*JSONRPC, error) {
	if err := checkJSON(body, lim); err != nil {
		return nil, fmt.Errorf("json-rpc: %w", err)
	}
	body = bytes.TrimSpace(body)
	out := &JSONRPC{}
	var raws []json.RawMessage
	if len(body) > 0 && body[0] == '[' {
		out.Batch = true
		if err := json.Unmarshal(body, &raws); err != nil {
			return nil, fmt.Errorf("json-rpc: %w: batch: %v", ErrMalformed, err)
		}
		if len(raws) == 0 {
			return nil, fmt.Errorf("json-rpc: %w: empty batch", ErrMalformed)
		}
		if len(raws) > lim.MaxItems {
			return nil, fmt.Errorf("json-rpc: %w: batch of %d messages, over the limit of %d", ErrMalformed, len(raws), lim.MaxItems)
		}
	} else {
		raws = []json.RawMessage{body}
	}
	for i, r := range raws {
		m, err := parseMessage(r, lim)
		if err != nil {
			if out.Batch {
				return nil, fmt.Errorf("json-rpc: message %d: %w", i, err)
			}
			return nil, fmt.Errorf("json-rpc: %w", err)
		}
		out.Messages = append(out.Messages, m)
	}
	return out, nil
}

func parseMessage(r json.RawMessage, lim Limits) (Message, error) {
	var raw rawMessage
	r = bytes.TrimSpace(r)
	if len(r) == 0 || r[0] != '{' {
		return Message{}, fmt.Errorf("%w: a message is not a JSON object", ErrMalformed)
	}
	if err := json.Unmarshal(r, &raw); err != nil {
		return Message{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if raw.JSONRPC != "2.0" {
		return Message{}, fmt.Errorf("%w: jsonrpc is %q, want \"2.0\"", ErrMalformed, raw.JSONRPC)
	}
	m := Message{ID: string(raw.ID)}
	if raw.ID != nil {
		switch raw.ID[0] {
		case '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', 'n':
		default:
			return Message{}, fmt.Errorf("%w: id is %s, want a string, number or null", ErrMalformed, cut(string(raw.ID), 40))
		}
	}
	if raw.Method == nil {
		if raw.Result == nil && raw.Error == nil {
			return Message{}, fmt.Errorf("%w: neither method nor result nor error", ErrMalformed)
		}
		m.Response = true
		return m, nil
	}
	m.Method = cut(*raw.Method, lim.MaxString)
	if raw.Params == nil || string(raw.Params) == "null" {
		return m, nil
	}
	switch m.Method {
	case "tools/call":
		var p struct {
			Name      *string         `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		if err := json.Unmarshal(raw.Params, &p); err != nil {
			return Message{}, fmt.Errorf("%w: tools/call params: %v", ErrMalformed, err)
		}
		if p.Name == nil || *p.Name == "" {
			return Message{}, fmt.Errorf("%w: tools/call without a tool name", ErrMalformed)
		}
		m.Tool = cut(*p.Name, lim.MaxString)
		if p.Arguments != nil && string(p.Arguments) != "null" {
			var args map[string]any
			d := json.NewDecoder(bytes.NewReader(p.Arguments))
			d.UseNumber()
			if err := d.Decode(&args); err != nil {
				return Message{}, fmt.Errorf("%w: tools/call arguments are not an object: %v", ErrMalformed, err)
			}
			m.Arguments = bound(args, lim, 0).(map[string]any)
		}
	case "message/send", "message/stream", "tasks/send", "tasks/sendSubscribe":
		parts, err := parseParts(raw.Params, lim)
		if err != nil {
			return Message{}, err
		}
		m.Parts = parts
	}
	return m, nil
}

// parseParts reads an agent-to-agent message's parts ("kind", or the older
// "type").
func parseParts(params json.RawMessage, lim Limits) ([]Part, error) {
	var p struct {
		Message *struct {
			Parts []struct {
				Kind string          `json:"kind"`
				Type string          `json:"type"`
				Text *string         `json:"text"`
				Data json.RawMessage `json:"data"`
				File *struct {
					MimeType string `json:"mimeType"`
					URI      string `json:"uri"`
					Bytes    string `json:"bytes"`
				} `json:"file"`
			} `json:"parts"`
		} `json:"message"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, fmt.Errorf("%w: message params: %v", ErrMalformed, err)
	}
	if p.Message == nil {
		return nil, fmt.Errorf("%w: message params without a message", ErrMalformed)
	}
	if len(p.Message.Parts) > lim.MaxItems {
		return nil, fmt.Errorf("%w: %d message parts, over the limit of %d", ErrMalformed, len(p.Message.Parts), lim.MaxItems)
	}
	var out []Part
	for i, q := range p.Message.Parts {
		kind := q.Kind
		if kind == "" {
			kind = q.Type
		}
		pt := Part{Kind: kind}
		switch kind {
		case "text":
			if q.Text == nil {
				return nil, fmt.Errorf("%w: part %d: text part without text", ErrMalformed, i)
			}
			pt.Text = cut(*q.Text, lim.MaxString)
		case "file":
			if q.File == nil {
				return nil, fmt.Errorf("%w: part %d: file part without file", ErrMalformed, i)
			}
			pt.MimeType, pt.URI, pt.Bytes = cut(q.File.MimeType, lim.MaxString), cut(q.File.URI, lim.MaxString), len(q.File.Bytes)
		case "data":
			pt.Text = cut(string(q.Data), lim.MaxString)
		default:
			return nil, fmt.Errorf("%w: part %d: kind %q, want text, file or data", ErrMalformed, i, cut(kind, 40))
		}
		out = append(out, pt)
	}
	return out, nil
}

// bound cuts strings to MaxString and collections to MaxItems (a map keeps
// its first keys in sorted order) below depth.
func bound(v any, lim Limits, depth int) any {
	switch x := v.(type) {
	case string:
		return cut(x, lim.MaxString)
	case json.Number:
		return cut(x.String(), 64)
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := make(map[string]any, min(len(keys), lim.MaxItems))
		for i, k := range keys {
			if i == lim.MaxItems {
				break
			}
			out[cut(k, lim.MaxString)] = bound(x[k], lim, depth+1)
		}
		return out
	case []any:
		out := x[:min(len(x), lim.MaxItems)]
		for i := range out {
			out[i] = bound(out[i], lim, depth+1)
		}
		return out
	}
	return v
}

// cut shortens s to n bytes without splitting a UTF-8 sequence.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// JSONFields returns the strings of a JSON body as fields, the values in
// document order (so a value split across fields joins up) and then the
// object keys (Name "path{}"), Name being the path ("messages[0].content");
// for ScanFields; within lim's size and nesting, at most maxJSONFields.
func JSONFields(where string, body []byte, lim Limits) ([]Field, error) {
	lim = lim.withDefaults()
	if err := checkJSON(body, lim); err != nil {
		return nil, err
	}
	d := json.NewDecoder(bytes.NewReader(body))
	type frame struct {
		array bool
		idx   int
		key   string
		path  string
	}
	var stack []frame
	var out, keys []Field
	path := func() string {
		if len(stack) == 0 {
			return ""
		}
		f := stack[len(stack)-1]
		if f.array {
			return f.path + "[" + strconv.Itoa(f.idx) + "]"
		}
		if f.path == "" {
			return f.key
		}
		return f.path + "." + f.key
	}
	expectKey := func() bool { return len(stack) > 0 && !stack[len(stack)-1].array && stack[len(stack)-1].key == "" }
	afterValue := func() {
		if len(stack) == 0 {
			return
		}
		if stack[len(stack)-1].array {
			stack[len(stack)-1].idx++
		} else {
			stack[len(stack)-1].key = ""
		}
	}
	for len(out) < maxJSONFields {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				stack = append(stack, frame{array: t == '[', path: path()})
			case '}', ']':
				stack = stack[:len(stack)-1]
				afterValue()
			}
		case string:
			if expectKey() {
				if len(keys) < maxJSONFields {
					keys = append(keys, Field{Where: where, Name: stack[len(stack)-1].path + "{}", Value: []byte(t)})
				}
				if t == "" {
					t = `""`
				}
				stack[len(stack)-1].key = t
				continue
			}
			out = append(out, Field{Where: where, Name: path(), Value: []byte(t)})
			afterValue()
		default:
			afterValue()
		}
	}
	return append(out, keys[:min(len(keys), maxJSONFields-len(out))]...), nil
}

// maxJSONFields bounds the fields JSONFields returns.
const maxJSONFields = 16384

func parseLLM(host, path string, body []byte, lim Limits) (*LLM, error) {
	host = strings.ToLower(host)
	if h, _, ok := strings.Cut(host, ":"); ok && !strings.Contains(h, "]") {
		host = h
	}
	query := ""
	path, query, _ = strings.Cut(path, "?")
	llm := recognizeLLM(host, path)
	if llm == nil {
		return nil, nil
	}
	if llm.Provider == ProviderGemini {
		llm.Stream = llm.Operation == "streamGenerateContent" || strings.Contains(query, "alt=sse")
		if len(bytes.TrimSpace(body)) > 0 {
			if err := checkJSON(body, lim); err != nil {
				return nil, fmt.Errorf("llm: %w", err)
			}
		}
		return llm, nil
	}
	// On an LLM provider's own host a body that cannot be read is
	// malformed; elsewhere the path alone (/v1/messages) is too weak a sign,
	// and a body without a model is simply some other API.
	known := llmHosts[host] || strings.HasSuffix(host, ".openai.azure.com")
	if err := checkJSON(body, lim); err != nil {
		if !known {
			return nil, nil
		}
		return nil, fmt.Errorf("llm: %s %s: %w", llm.Provider, llm.Operation, err)
	}
	var b struct {
		Model  *string `json:"model"`
		Stream *bool   `json:"stream"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		if !known {
			return nil, nil
		}
		return nil, fmt.Errorf("llm: %s %s: %w: %v", llm.Provider, llm.Operation, ErrMalformed, err)
	}
	if b.Model != nil {
		llm.Model = cut(*b.Model, lim.MaxString)
	}
	if llm.Model == "" {
		if !known {
			return nil, nil
		}
		return nil, fmt.Errorf("llm: %s %s: %w: no model", llm.Provider, llm.Operation, ErrMalformed)
	}
	llm.Stream = b.Stream != nil && *b.Stream
	return llm, nil
}

// llmHosts are the providers' own API hosts.
var llmHosts = map[string]bool{
	"api.openai.com": true, "api.anthropic.com": true, "generativelanguage.googleapis.com": true,
}

// openAIOps are the OpenAI-shaped operations by path suffix (also served by
// Azure OpenAI and OpenAI-compatible gateways).
var openAIOps = []struct{ suffix, op string }{
	{"/chat/completions", "chat.completions"}, // before /completions
	{"/responses", "responses"},
	{"/completions", "completions"},
	{"/embeddings", "embeddings"},
}

// recognizeLLM names the provider and operation of host and path, or nil.
func recognizeLLM(host, path string) *LLM {
	if i := strings.Index(path, "/models/"); i >= 0 {
		rest := path[i+len("/models/"):]
		if model, op, ok := strings.Cut(rest, ":"); ok && model != "" && !strings.Contains(model, "/") {
			switch op {
			case "generateContent", "streamGenerateContent", "countTokens", "embedContent":
				return &LLM{Provider: ProviderGemini, Model: model, Operation: op}
			}
		}
	}
	if path == "/v1/messages" || path == "/v1/complete" || path == "/v1/messages/count_tokens" || host == "api.anthropic.com" && strings.HasPrefix(path, "/v1/messages") {
		return &LLM{Provider: ProviderAnthropic, Operation: strings.TrimPrefix(path, "/v1/")}
	}
	for _, o := range openAIOps {
		suffix, op := o.suffix, o.op
		if !strings.HasSuffix(path, suffix) {
			continue
		}
		if host == "api.openai.com" || strings.Contains(path, "/v1/") || strings.HasPrefix(path, "/openai/") {
			l := &LLM{Provider: ProviderOpenAI, Operation: op}
			if d, ok := strings.CutPrefix(path, "/openai/deployments/"); ok {
				l.Model, _, _ = strings.Cut(d, "/")
			}
			return l
		}
	}
	return nil
}
