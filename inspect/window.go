package inspect

// Window finds secrets split across consecutive requests of one sandbox: it
// keeps the sandbox's recent small values (Config.WindowBytes, for
// Config.Window) and scans only the joins a request's new values make with
// them: all kept and new values glued, and, each set off by line breaks,
// the runs from one of the newest kept values to one of the first new
// ones, so a format that must start or end at a word boundary is found
// next to word characters. A value shorter than 4 bytes, or one the window
// already keeps (the query every request repeats), is no new piece and
// costs no scan; a kept value that was part of a finding (one within its
// own request included), sent again, is (a retry of a blocked split is
// found). A join's finding is the window's when its match takes bytes from
// kept and new values, or, revealed by a decoding, when neither the kept
// nor the new values alone reveal it, so a secret is reported once and a
// kept one is never blamed on a later request (DESIGN.md). Memory is bounded per sandbox and in the number of
// sandboxes (least recently used evicted). Safe for concurrent use.
type Window struct {
	s  *Scanner
	id string
}

// Window returns the window of sandboxID.
func (s *Scanner) Window(sandboxID string) *Window {
	return &Window{s: s, id: sandboxID}
}

// Add records fields (one request's) in the window and returns the findings
// that only the window shows: a secret whose pieces came in different
// requests, with Split set. Findings within fields alone come from
// ScanFields, not from Add.
func (w *Window) Add(fields []Field) []Finding {
	return w.s.windows.add(w.s, w.id, fields)
}

// Forget drops the window of a sandbox that ended.
func (s *Scanner) Forget(sandboxID string) {
	s.windows.forget(sandboxID)
}
