package inspect

// streamChunk is how many bytes a Stream gathers before it scans.
const streamChunk = 64 << 10

// write takes p a chunk at a time, so a Stream holds at most streamChunk
// pending bytes and Overlap carried ones whatever the size of one write.
func (st *Stream) write(p []byte) int {
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), streamChunk-len(st.pending))
		st.pending = append(st.pending, p[:k]...)
		p = p[k:]
		if len(st.pending) >= streamChunk {
			st.flush()
		}
	}
	return n
}

// flush scans the carried overlap and the pending bytes together, keeps
// the new findings, and carries the last Overlap bytes on.
func (st *Stream) flush() {
	if len(st.pending) == 0 {
		return
	}
	buf := append(st.carry, st.pending...)
	sc := st.s.newState(st.where)
	sc.layer(buf, "", 0)
	for _, f := range sc.findings() {
		key := f.Detector + "\x00" + f.Fingerprint + "\x00" + f.Encoding
		if st.seen[key] {
			continue
		}
		st.seen[key] = true
		st.findings = append(st.findings, f)
	}
	keep := min(len(buf), st.s.cfg.Overlap)
	st.carry = append(make([]byte, 0, st.s.cfg.Overlap+streamChunk), buf[len(buf)-keep:]...)
	st.pending = st.pending[:0]
}
