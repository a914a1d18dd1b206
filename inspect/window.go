package inspect

// Window finds secrets split across consecutive requests of one sandbox: it
// keeps the sandbox's recent small values (Config.WindowBytes, for
// Config.Window) and scans them joined with each new request's. Memory is
// bounded per sandbox and in the number of sandboxes (least recently used
// evicted). Safe for concurrent use.
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
