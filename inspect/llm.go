package inspect

// Providers of LLM.Provider.
const (
	ProviderOpenAI    = "openai"
	ProviderAnthropic = "anthropic"
	ProviderGemini    = "gemini"
)

// LLM is what policy sees of a request to an LLM API.
type LLM struct {
	Provider  string `json:"provider"`
	Model     string `json:"model"`
	Stream    bool   `json:"stream"`
	Operation string `json:"operation,omitempty"` // "chat.completions", "responses", "messages", "generateContent", ...
}

// ParseLLM recognizes an OpenAI-, Anthropic- or Gemini-shaped API request by
// its host and path and reads provider, model and stream from path and body.
// It returns nil, nil for a request that is no LLM API call, and an error
// wrapping ErrMalformed for one whose body cannot be read within lim.
func ParseLLM(host, path string, body []byte, lim Limits) (*LLM, error) {
	return parseLLM(host, path, body, lim.withDefaults())
}
