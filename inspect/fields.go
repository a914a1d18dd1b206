package inspect

// maxJoined bounds the bytes ScanFields joins to look for splits.
const maxJoined = 256 << 10

func (s *Scanner) scanFields(fields []Field) []Finding {
	st := s.newState("")
	for _, f := range fields {
		st.where = f.Where
		st.run(f.Value)
	}
	if len(fields) < 2 {
		return st.findings()
	}
	// Join the values, remembering where each starts, and report what only
	// the join shows, at the field its match starts in.
	var joined []byte
	starts := make([]int, 0, len(fields))
	for _, f := range fields {
		if len(joined)+len(f.Value) > maxJoined {
			break
		}
		starts = append(starts, len(joined))
		joined = append(joined, f.Value...)
	}
	sub := s.newState(fields[0].Where)
	sub.minConf = true
	sub.layer(joined, "", 0)
	for _, h := range sub.hits {
		if h.Class != ClassCredential && h.Class != ClassCanary {
			continue
		}
		h.Split = true
		h.Where = fields[0].Where
		if h.pos >= 0 {
			for i, at := range starts {
				if at <= h.pos {
					h.Where = fields[i].Where
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
