package inspect

import "bytes"

// phraseGates hold, for each injectionPhrases entry (same index), groups of
// lowercase words a match must contain, one of each group: text without
// them cannot match, and the phrase's regexp (an NFA over the whole text,
// well under 1 MB/s for ten of them) is not run. TestPhraseGates checks no
// gate turns a match away and that there is one gate per phrase.
var phraseGates = [...][][]string{
	{{"ignore", "disregard", "forget", "override"}, {"previous", "prior", "above", "earlier", "preceding", "original", "system"}},
	{{"not", "don't", "never"}, {"tell", "inform", "mention", "reveal", "notify", "alert"}, {"user"}},
	{{"instruction"}, {":"}},
	{{"<"}, {"important", "system", "instruction"}},
	{{"you"}, {"now"}},
	{{"ai", "llm", "assistant", "agent", "model"}, {"must", "should", "required", "need"}},
	{{"id_", ".aws/credentials", ".netrc", ".git-credentials", "/etc/shadow"}},
	{{"run", "execute"}, {"following", "this"}, {"command", "script", "code"}},
	{{"curl"}, {"|"}, {"sh"}},
	{{"system", "jailbreak", "developer"}},
}

// gateText is text as the gates read it: ASCII lowercased, and the two
// non-ASCII letters the regexps' case folding takes for ASCII ones (long s,
// Kelvin sign) replaced by them.
func gateText(text []byte) []byte {
	out := make([]byte, len(text))
	for i, c := range text {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		out[i] = c
	}
	if bytes.Contains(out, []byte("\u017f")) {
		out = bytes.ReplaceAll(out, []byte("\u017f"), []byte("s"))
	}
	if bytes.Contains(out, []byte("\u212a")) {
		out = bytes.ReplaceAll(out, []byte("\u212a"), []byte("k"))
	}
	return out
}

// phraseMayMatch reports whether injectionPhrases[i] can match the text
// whose gateText is lower.
func phraseMayMatch(i int, lower []byte) bool {
	for _, group := range phraseGates[i] {
		found := false
		for _, w := range group {
			if bytes.Contains(lower, []byte(w)) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
