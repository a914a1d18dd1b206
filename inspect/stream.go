package inspect

// Stream scans a body written to it piece by piece without buffering it
// whole: each scan covers the new bytes plus the last Config.Overlap bytes
// before them, so a token straddling two writes is found. Small writes are
// gathered until Findings or Close scans them. Not safe for concurrent use.
type Stream struct {
	s        *Scanner
	where    string
	carry    []byte // the last Overlap bytes already scanned
	pending  []byte // bytes written but not yet scanned
	seen     map[string]bool
	findings []Finding
}

// NewStream starts a stream whose findings carry where.
func (s *Scanner) NewStream(where string) *Stream {
	return &Stream{s: s, where: where, seen: map[string]bool{}}
}

// Write scans p (with the overlap before it) once enough is pending. It never
// fails; the error is there for io.Writer.
func (st *Stream) Write(p []byte) (int, error) {
	return st.write(p), nil
}

// Findings scans what is pending and returns every finding so far.
func (st *Stream) Findings() []Finding {
	st.flush()
	return append([]Finding(nil), st.findings...)
}

// Close scans what is pending; Findings then returns the whole body's.
func (st *Stream) Close() error {
	st.flush()
	return nil
}
