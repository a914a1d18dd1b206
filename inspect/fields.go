package inspect

// Split bounds: the bytes ScanFields joins, the most pieces of one run it
// joins apart from the whole, and the largest piece such a run takes.
const (
	maxJoined      = 256 << 10
	maxSplitPieces = 4
	maxSplitPiece  = 256
)

func (s *Scanner) scanFields(fields []Field) []Finding {
	gen := s.canaries.gen.Load()
	k, cacheable := s.clean.key('f', fields)
	if cacheable && s.clean.has(k, gen) {
		return nil
	}
	fs := s.scanFieldsUncached(fields)
	if cacheable && len(fs) == 0 {
		s.clean.put(k, gen)
	}
	return fs
}

func (s *Scanner) scanFieldsUncached(fields []Field) []Finding {
	st := s.newState("")
	gen := s.canaries.gen.Load()
	for _, f := range fields {
		// Each field is Scan(f.Where, f.Value): a value the sandbox
		// repeats is known clean even when its neighbours change.
		one := [1]Field{f}
		k, cacheable := s.clean.key('s', one[:])
		if cacheable && s.clean.has(k, gen) {
			continue
		}
		// Clean alone too: it offered no hit (not even one an earlier
		// field already reported) and lacked no decoding budget.
		st.where = f.Where
		n, starved := st.found, st.starved
		st.starved = false
		st.run(f.Value)
		if cacheable && st.found == n && !st.starved {
			s.clean.put(k, gen)
		}
		st.starved = st.starved || starved
	}
	if len(fields) < 2 {
		return st.findings()
	}
	// Join the values, remembering where each starts, and report what only
	// the join shows, at the field its match starts in. The whole join finds
	// a secret cut in many pieces; runs of two to four small pieces, set off
	// by line breaks, find one whose format must end at a word boundary
	// that the next piece would glue over.
	size := 0
	for _, f := range fields {
		size += len(f.Value)
	}
	joined := make([]byte, 0, min(maxJoined, size)+min(maxJoined, maxSplitPieces*size))
	var at []int       // joined offset where each piece starts
	var from []int     // the field each piece is
	var scanned []span // pieces the join holds as they are (scanned above)
	piece := func(i int) {
		at = append(at, len(joined))
		from = append(from, i)
		lo := len(joined)
		joined = appendText(joined, fields[i].Value)
		if len(joined)-lo == len(fields[i].Value) && len(fields[i].Value) <= s.cfg.MaxBytes {
			scanned = append(scanned, span{lo, len(joined)})
		}
	}
	for i := range fields {
		if len(joined)+len(fields[i].Value) > maxJoined {
			break
		}
		piece(i)
	}
	for k := 2; k <= maxSplitPieces; k++ {
		for i := 0; i+k <= len(fields); i++ {
			small := true
			for _, f := range fields[i : i+k] {
				small = small && len(f.Value) <= maxSplitPiece
			}
			if !small || len(joined)+k*maxSplitPiece > 2*maxJoined {
				continue
			}
			joined = append(joined, '\n')
			for j := i; j < i+k; j++ {
				piece(j)
			}
		}
	}
	sub := s.newState(fields[0].Where)
	sub.minConf = true
	sub.scanned = scanned
	sub.layer(joined, "", 0)
	for _, h := range sub.hits {
		if h.Class != ClassCredential && h.Class != ClassCanary {
			continue
		}
		h.Split = true
		h.Where = fields[0].Where
		if h.pos >= 0 {
			for i, a := range at {
				if a <= h.pos {
					h.Where = fields[from[i]].Where
				}
			}
		}
		if st.seen[h.Detector+"\x00"+h.Fingerprint+"\x00"+h.Encoding] {
			continue
		}
		st.add(h)
	}
	return st.findings()
}

// appendText appends v without its control bytes: a split is looked for in
// the text of the pieces, and framing (protobuf tags and lengths, line
// breaks between frames) would cut it.
func appendText(dst, v []byte) []byte {
	for len(v) > 0 {
		i := 0
		for i < len(v) && v[i] >= 0x20 && v[i] != 0x7f {
			i++
		}
		dst = append(dst, v[:i]...) // text up to a control byte, at once
		for i < len(v) && (v[i] < 0x20 || v[i] == 0x7f) {
			i++
		}
		v = v[i:]
	}
	return dst
}
