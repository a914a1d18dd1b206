package inspect

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
