package inspect

import (
	"bytes"
	"math"
	"regexp"
	"sync"
)

// Entropy detector tuning (see TestEntropyRates for the benign and attack
// names it was set on).
const (
	// EntropyThreshold is the score at or above which a DNS label or URL
	// path segment is reported.
	EntropyThreshold = 3.0
	// entropyMinLen is the shortest label or segment scored.
	entropyMinLen = 16
	// entropyFullLen is the length from which a label counts fully.
	entropyFullLen = 20
)

var (
	// semverRE matches a version, Go pseudo-versions included
	// (v0.0.0-20250730193827-2d320260d730).
	semverRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^v?\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$`)
	})
	uuidRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	})
	// hashLens are the lengths of hex digests: git object ids (SHA-1,
	// SHA-256), MD5, SHA-224/384/512.
	hashLens = map[int]bool{32: true, 40: true, 56: true, 64: true, 96: true, 128: true}
)

// EntropyScore scores one DNS label or URL path segment: its Shannon
// entropy in bits per byte, weighted by how often it switches between
// letters and digits (random base16/32/36/64 text does so on a quarter to
// a half of its bytes, words and version strings rarely), and scaled down
// below entropyFullLen bytes. Random encodings score about 3.5 to 4.5;
// words, names and versions under 3. A UUID scores 0 (REST paths are full
// of them); hexDigest says whether a hex digest of a hash's length
// ("sha256:..." included) scores 0 too, as it should in URL paths (git
// object ids, registry blobs) and not in DNS names.
func EntropyScore(s []byte, hexDigest bool) float64 {
	n := len(s)
	if n < entropyMinLen || uuidRE().Match(s) {
		return 0
	}
	if hexDigest {
		h := s
		if i := bytes.IndexByte(h, ':'); i > 0 && i <= 8 {
			h = h[i+1:]
		}
		if hashLens[len(h)] && allHex(h) {
			return 0
		}
	}
	switches := 0
	prev := 0
	for _, c := range s {
		k := 0
		switch {
		case '0' <= c && c <= '9':
			k = 1
		case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
			k = 2
		default:
			continue // punctuation neither breaks nor makes a switch
		}
		if prev != 0 && k != prev {
			switches++
		}
		prev = k
	}
	r := float64(switches) / float64(n-1)
	lf := math.Min(1, float64(n)/entropyFullLen)
	return math.Round(shannon(s)*lf*(0.5+1.5*r)*100) / 100
}

func allHex(s []byte) bool {
	for _, c := range s {
		if !isHex(c) {
			return false
		}
	}
	return true
}

// dnsName runs the DNS detectors over a question name: each label below the
// last two is scored and tried as an encoding, and the labels joined are
// scanned for a secret split across them.
func (st *scanState) dnsName(data []byte) {
	name := bytes.TrimSuffix(bytes.ToLower(data), []byte("."))
	labels := bytes.Split(name, []byte("."))
	if len(labels) <= 2 {
		return
	}
	sub := labels[:len(labels)-2]
	for _, l := range sub {
		st.scoreLabel(DetectorDNSEntropy, l, Medium, false)
	}
	// Data split over labels comes first in a name: join the first two,
	// three, ... labels (at most maxLabelJoins) and scan each join.
	for k := 2; k <= len(sub) && k <= maxLabelJoins+1; k++ {
		st.joined(bytes.Join(sub[:k], nil))
	}
}

// maxLabelJoins bounds the label prefixes dnsName joins.
const maxLabelJoins = 8

// urlPath scores each segment of a URL path (percent-decoded), ignoring a
// file extension.
func (st *scanState) urlPath(data []byte) {
	if i := bytes.IndexAny(data, "?#"); i >= 0 {
		data = data[:i]
	}
	for _, seg := range bytes.Split(data, []byte("/")) {
		if d, ok := percentDecode(seg); ok {
			seg = d
		}
		if len(seg) >= minRun {
			st.rules(seg, "") // a rule's terminator may be the '/' that ends a segment
		}
		if i := bytes.LastIndexByte(seg, '.'); i > 0 && len(seg)-i <= 8 {
			seg = seg[:i] // "lodash-4.17.21.tgz" scores "lodash-4.17.21"
		}
		for _, part := range bytes.Split(seg, []byte("@")) { // "json@v0.0.0-2026...-44df1a37e875"
			if !semverRE().Match(part) {
				st.scoreLabel(DetectorPathEntropy, part, Low, true)
			}
		}
	}
}

// scoreLabel reports a label that decodes to text (Class encoded) or scores
// at or above EntropyThreshold (Class entropy).
func (st *scanState) scoreLabel(detector string, l []byte, encConf string, hexDigest bool) {
	if len(l) < entropyMinLen {
		return
	}
	if isTokenString(l) {
		for _, d := range decodeRun(l) {
			st.add(hit{Finding: Finding{Detector: detector, Class: ClassEncoded, Where: st.where, Encoding: d.name, Confidence: encConf, Fingerprint: st.s.fingerprint(l)}, pos: -1})
			return
		}
	}
	if sc := EntropyScore(l, hexDigest); sc >= EntropyThreshold {
		st.add(hit{Finding: Finding{Detector: detector, Class: ClassEntropy, Where: st.where, Confidence: Low, Score: sc, Fingerprint: st.s.fingerprint(l)}, pos: -1})
	}
}

func isTokenString(b []byte) bool {
	for _, c := range b {
		if !isToken(c) {
			return false
		}
	}
	return true
}

// joined scans pieces joined together for what none showed alone, and
// reports it as split.
func (st *scanState) joined(j []byte) {
	sub := st.s.newState(st.where)
	sub.minConf = true
	sub.layer(j, "", 0)
	for _, h := range sub.hits {
		if h.Class != ClassCredential && h.Class != ClassCanary {
			continue
		}
		h.Split = true
		h.pos = -1
		key := h.Detector + "\x00" + h.Fingerprint + "\x00" + h.Encoding
		if st.seen[key] {
			continue
		}
		st.add(h)
	}
}
