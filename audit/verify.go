package audit

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// MaxLineSize bounds one audit line for the readers in this package.
const MaxLineSize = 16 << 20

// Verification failure reasons (VerifyError.Reason).
const (
	ReasonBadJSON       = "bad json"
	ReasonBadRecord     = "bad record"
	ReasonSeqGap        = "seq gap"
	ReasonPrevMismatch  = "prev mismatch"
	ReasonBadCheckpoint = "bad checkpoint"
	ReasonBadSignature  = "bad signature"
	ReasonTornTail      = "torn tail"
	ReasonUnsigned      = "unsigned tail"
	ReasonRead          = "read error"
)

// Input is one file of a chain for Verify: Name is used in errors.
type Input struct {
	Name string
	R    io.Reader
}

// VerifyOptions tune Verify.
type VerifyOptions struct {
	// PublicKey checks every checkpoint's Ed25519 signature. Nil checks only the
	// chain (any edit, insertion, deletion or reorder), not a whole rewrite.
	PublicKey ed25519.PublicKey
	// Partial accepts a first input that starts mid-chain (an older rotated file
	// was removed); otherwise the chain must start at seq 1 with GenesisPrev.
	Partial bool
	// MaxUnsigned, with PublicKey, is the most records allowed after the last
	// valid checkpoint: a chain rewritten without the key has none. Negative
	// means no limit.
	MaxUnsigned int
	// Complete says the chain belongs to a writer that has stopped (or to
	// rotated files only): with PublicKey, its last line must be a valid signed
	// checkpoint, as Close and rotation leave it. It catches a tail cut at a line
	// boundary after the last checkpoint. A cut exactly after an earlier
	// checkpoint still verifies: only a head recorded elsewhere (Report.Head and
	// LastSeq, kept off the machine) can show that records were removed from the end.
	Complete bool
	// Each, when set, is called with every record that is not a checkpoint,
	// in order, once its line's seq and prev checked (audit/report aggregates
	// in the same pass). A line's own content is vouched for only by the next
	// line's prev: when Verify fails, the caller must not trust what Each saw.
	// It must not keep r.
	Each func(r *Record)
}

// Report summarises a verification; on failure it covers the lines before the
// bad one.
type Report struct {
	Files       int
	Lines       int    // whole lines verified
	Records     int    // lines that are not checkpoints
	Checkpoints int    // checkpoint lines (signatures checked when a key was given)
	FirstSeq    uint64 // seq of the first line
	LastSeq     uint64 // seq of the last verified line
	Head        string // hex SHA-256 of the last verified line
	// SignedThrough is the upto_seq of the last valid checkpoint (with a key).
	SignedThrough uint64
	// Unsigned counts records after the last valid checkpoint.
	Unsigned          int
	SignaturesChecked bool
	// PrunedThrough is the highest seq a retention record says was deleted
	// (0: none), and PrunedFiles how many files the retention records name.
	// A chain that does not start at seq 1 is accepted (without Partial) only
	// when it starts at most one past PrunedThrough, with the recorded head
	// when exactly one past.
	PrunedThrough uint64
	PrunedFiles   int
	// AnchorSeq, for such a chain, is the upto_seq of its first checkpoint
	// (signed, with a key): the kept records before it are trusted because
	// it signs the hash chain that runs through them.
	AnchorSeq uint64
	// ExportGaps counts export_gap markers (an exported copy that lacks
	// records retention deleted before they were shipped), each accounted
	// for by a retention record; ExportGapRecords the seqs they stand for.
	ExportGaps       int
	ExportGapRecords uint64
}

// VerifyError names the first bad line and why.
type VerifyError struct {
	File   string
	Line   int // 1-based line number within File
	Reason string
	Detail string
}

func (e *VerifyError) Error() string {
	return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Reason, e.Detail)
}

// lineReader yields lines without their newline, reusing one buffer.
type lineReader struct {
	br  *bufio.Reader
	acc []byte
}

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 64<<10)}
}

// next returns the next line; complete is false for a last line with no newline.
// It returns io.EOF when nothing is left.
func (l *lineReader) next() (line []byte, complete bool, err error) {
	l.acc = l.acc[:0]
	for {
		frag, err := l.br.ReadSlice('\n')
		if len(l.acc) == 0 && err == nil {
			return frag[:len(frag)-1], true, nil
		}
		l.acc = append(l.acc, frag...)
		switch {
		case err == nil:
			return l.acc[:len(l.acc)-1], true, nil
		case errors.Is(err, bufio.ErrBufferFull):
			if len(l.acc) > MaxLineSize {
				return nil, false, fmt.Errorf("line longer than %d bytes", MaxLineSize)
			}
		case errors.Is(err, io.EOF):
			if len(l.acc) == 0 {
				return nil, false, io.EOF
			}
			return l.acc, false, nil
		default:
			return nil, false, err
		}
	}
}

// VerifyFiles opens paths in order and verifies them as one chain.
func VerifyFiles(opts VerifyOptions, paths ...string) (Report, error) {
	inputs := make([]Input, 0, len(paths))
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			for _, in := range inputs {
				in.R.(*os.File).Close()
			}
			return Report{}, fmt.Errorf("audit: %w", err)
		}
		inputs = append(inputs, Input{Name: p, R: f})
	}
	defer func() {
		for _, in := range inputs {
			in.R.(*os.File).Close()
		}
	}()
	return Verify(opts, inputs...)
}

// Verify checks inputs, in order, as one hash chain: every line whole and valid
// JSON, seq rising by one, prev the SHA-256 of the previous line (across input
// boundaries too), every checkpoint consistent and, with a public key, signed by
// it; and with a key, at most MaxUnsigned records after the last checkpoint.
// The error is a *VerifyError naming the first bad line, or an I/O error.
func Verify(opts VerifyOptions, inputs ...Input) (Report, error) {
	v := &verifier{opts: opts, prev: GenesisPrev, prevWhere: "genesis"}
	if opts.PublicKey != nil {
		if len(opts.PublicKey) != ed25519.PublicKeySize {
			return v.rep, fmt.Errorf("audit: public key has %d bytes, want %d", len(opts.PublicKey), ed25519.PublicKeySize)
		}
		v.wantKeyID = KeyID(opts.PublicKey)
		v.rep.SignaturesChecked = true
	}
	for _, in := range inputs {
		v.rep.Files++
		lr := newLineReader(in.R)
		for n := 1; ; n++ {
			line, complete, err := lr.next()
			if errors.Is(err, io.EOF) {
				break
			}
			at := VerifyError{File: in.Name, Line: n}
			if err != nil {
				return v.rep, at.because(ReasonRead, "%v", err)
			}
			if !complete {
				return v.rep, at.because(ReasonTornTail, "last line has no newline (%d bytes): a write was cut short; the file is good up to line %d", len(line), n-1)
			}
			if err := v.line(at, line); err != nil {
				return v.rep, err
			}
		}
		v.prevWhere = "the last line of " + in.Name
	}
	err := v.end() // it completes v.rep: call it before reading v.rep
	return v.rep, err
}

// verifier is Verify's state along the chain.
type verifier struct {
	opts       VerifyOptions
	rep        Report
	prev       string // SHA-256 of the previous line; "" right after an export gap
	prevWhere  string
	seq        uint64
	started    bool
	firstUnsig *VerifyError // first record after the last valid checkpoint
	wantKeyID  string
	start      *chainStart // set when the chain does not start at seq 1
	pruned     retentionMark
	gaps       exportGaps
	hexBuf     [64]byte
}

// because is the error of the line at e: reason, and the detail.
func (e VerifyError) because(reason, format string, args ...any) *VerifyError {
	e.Reason, e.Detail = reason, fmt.Sprintf(format, args...)
	return &e
}

// line checks one whole line at at and moves the chain past it.
func (v *verifier) line(at VerifyError, line []byte) error {
	var r Record
	if err := json.Unmarshal(line, &r); err != nil {
		return at.because(ReasonBadJSON, "%v", err)
	}
	if r.Kind == KindExportGap {
		g, err := v.gaps.add(line, v.started, v.seq, at)
		if err != nil {
			return at.because(ReasonSeqGap, "%v", err)
		}
		if v.started {
			v.seq, v.prev, v.prevWhere = g.through, "", "the export_gap marker"
		}
		return nil
	}
	if err := checkShape(&r); err != nil {
		return at.because(ReasonBadRecord, "%v", err)
	}
	if !v.started {
		v.started = true
		v.rep.FirstSeq = r.Seq
		switch {
		case v.opts.Partial:
			v.seq, v.prev = r.Seq-1, r.Prev
		case r.Seq == 1 && r.Prev != GenesisPrev:
			return at.because(ReasonPrevMismatch, "the first record's prev %.16s… is not the genesis prev", r.Prev)
		case r.Seq != 1:
			// Retention may have deleted what came before: a retention
			// record later in the chain must say so (checked at the end).
			v.start = &chainStart{seq: r.Seq, prev: r.Prev, at: at}
			v.seq, v.prev = r.Seq-1, r.Prev
		}
	}
	if g := v.gaps.open(); g != nil {
		if r.Seq != g.through+1 {
			return at.because(ReasonSeqGap, "seq %d after an export_gap marker through seq %d, want %d", r.Seq, g.through, g.through+1)
		}
		if v.prev == "" {
			v.prev, g.next = r.Prev, r.Prev // checked against the retention record at the end
		}
	}
	if r.Seq != v.seq+1 {
		return at.because(ReasonSeqGap, "seq %d, want %d (a line was removed, inserted or moved)", r.Seq, v.seq+1)
	}
	if r.Prev != v.prev {
		return at.because(ReasonPrevMismatch, "prev %.16s… does not match SHA-256 %.16s… of %s (that line was altered, or a line was removed or inserted here)", r.Prev, v.prev, v.prevWhere)
	}
	if r.Kind == KindCheckpoint {
		if err := v.checkpoint(at, &r); err != nil {
			return err
		}
	} else {
		if r.Kind == KindRetention {
			if err := v.pruned.add(&r); err != nil {
				return at.because(ReasonBadRecord, "%v", err)
			}
		}
		v.rep.Records++
		v.rep.Unsigned++
		if v.opts.Each != nil {
			v.opts.Each(&r)
		}
		if v.firstUnsig == nil {
			first := at
			v.firstUnsig = &first
		}
	}
	sum := sha256.Sum256(line)
	hex.Encode(v.hexBuf[:], sum[:])
	v.prev = string(v.hexBuf[:])
	v.prevWhere = fmt.Sprintf("line %d", at.Line)
	v.seq = r.Seq
	v.rep.Lines++
	v.rep.LastSeq = r.Seq
	v.rep.Head = v.prev
	return nil
}

// checkpoint checks a checkpoint record r (at at) against the chain and,
// with a public key, its signature.
func (v *verifier) checkpoint(at VerifyError, r *Record) error {
	c := r.Checkpoint
	if c.Head != r.Prev {
		return at.because(ReasonBadCheckpoint, "head %.16s… does not match the chain's %.16s…", c.Head, r.Prev)
	}
	if c.Seq != r.Seq-1 {
		return at.because(ReasonBadCheckpoint, "upto_seq %d, want %d", c.Seq, r.Seq-1)
	}
	if key := v.opts.PublicKey; key != nil {
		if c.KeyID != v.wantKeyID {
			return at.because(ReasonBadSignature, "signed by key_id %s, want %s (the given public key)", c.KeyID, v.wantKeyID)
		}
		sig, err := base64.StdEncoding.DecodeString(c.Signature)
		if err != nil || !ed25519.Verify(key, CheckpointMessage(c.Seq, c.Head), sig) {
			return at.because(ReasonBadSignature, "Ed25519 signature over seq %d does not verify with the given public key", c.Seq)
		}
		v.rep.SignedThrough = c.Seq
		v.rep.Unsigned = 0
		v.firstUnsig = nil
	}
	v.rep.Checkpoints++
	if v.start != nil && v.rep.AnchorSeq == 0 {
		v.rep.AnchorSeq = c.Seq
	}
	return nil
}

// end checks what only the whole chain shows: export gaps and a chain that
// starts past seq 1 accounted for by retention records, and the unsigned
// tail.
func (v *verifier) end() error {
	rep, signed := &v.rep, v.opts.PublicKey != nil
	rep.PrunedThrough, rep.PrunedFiles = v.pruned.through, v.pruned.files
	if err := v.gaps.check(&v.pruned, rep, signed); err != nil {
		return err
	}
	if v.start != nil {
		if err := v.start.check(&v.pruned, rep, signed); err != nil {
			return err
		}
	}
	switch {
	case !signed:
		rep.Unsigned = rep.Records
	case v.opts.Complete && rep.Unsigned > 0:
		return v.firstUnsig.because(ReasonUnsigned, "%d records from here on are not followed by a signed checkpoint, but a stopped writer ends every file with one: the file was cut short (or its writer crashed, or is still running)", rep.Unsigned)
	case v.opts.MaxUnsigned >= 0 && rep.Unsigned > v.opts.MaxUnsigned:
		return v.firstUnsig.because(ReasonUnsigned, "%d records from here on are not covered by a checkpoint signed with the given key (limit %d): the chain may have been rewritten without the key", rep.Unsigned, v.opts.MaxUnsigned)
	}
	return nil
}

// checkShape checks the fields every line must carry.
func checkShape(r *Record) error {
	switch {
	case r.Seq == 0:
		return errors.New("seq missing or zero")
	case len(r.Prev) != 64 || !isLowerHex(r.Prev):
		return fmt.Errorf("prev %q is not 64 lowercase hex digits", r.Prev)
	case r.Kind == "":
		return errors.New("kind missing")
	case r.Kind == KindCheckpoint && r.Checkpoint == nil:
		return errors.New("checkpoint record without a checkpoint field")
	case r.Kind != KindCheckpoint && r.Checkpoint != nil:
		return fmt.Errorf("checkpoint field on a %q record", r.Kind)
	}
	return nil
}

func isLowerHex(s string) bool {
	return bytes.IndexFunc([]byte(s), func(c rune) bool { return !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') }) < 0
}

// chainStart is the first line of a chain that does not start at seq 1.
type chainStart struct {
	seq  uint64
	prev string
	at   VerifyError // File and Line of the first line
}

// retentionMark is what the chain's retention records say was deleted: the
// highest pruned seq, the head of that line and the seq of the record.
type retentionMark struct {
	through   uint64
	head      string
	recordSeq uint64
	files     int
	// all maps each retention record's pruned seq to its head and seq.
	all map[uint64]retentionMark
}

func (m *retentionMark) add(r *Record) error {
	var through uint64
	var head string
	var files []string
	if json.Unmarshal(r.Extra[RetentionPrunedSeq], &through) != nil || through == 0 || through >= r.Seq {
		return fmt.Errorf("retention record without a valid %s", RetentionPrunedSeq)
	}
	if json.Unmarshal(r.Extra[RetentionPrunedHead], &head) != nil || len(head) != 64 || !isLowerHex(head) {
		return fmt.Errorf("retention record without a valid %s", RetentionPrunedHead)
	}
	_ = json.Unmarshal(r.Extra[RetentionDeletedFiles], &files)
	m.files += len(files)
	if m.all == nil {
		m.all = map[uint64]retentionMark{}
	}
	m.all[through] = retentionMark{through: through, head: head, recordSeq: r.Seq}
	if through >= m.through {
		m.through, m.head, m.recordSeq = through, head, r.Seq
	}
	return nil
}

// check accepts a chain that starts at s only where retention deleted what
// came before: at most one past the last deleted seq (files retention named
// may still be there after a crash), with the recorded head when exactly one
// past, and, with a key, the retention record covered by a signed checkpoint
// (an unsigned one could have been appended by whoever deleted the files).
func (s *chainStart) check(m *retentionMark, rep *Report, signed bool) error {
	e := s.at
	switch {
	case m.through == 0:
		e.Reason, e.Detail = ReasonSeqGap, fmt.Sprintf("chain starts at seq %d with prev %.16s…, and no retention record says what came before was deleted (give the older rotated files first, or verify a partial chain)", s.seq, s.prev)
	case s.seq > m.through+1:
		e.Reason, e.Detail = ReasonSeqGap, fmt.Sprintf("chain starts at seq %d, but retention deleted only through seq %d (record seq %d): seq %d..%d are missing", s.seq, m.through, m.recordSeq, m.through+1, s.seq-1)
	case s.seq == m.through+1 && s.prev != m.head:
		e.Reason, e.Detail = ReasonPrevMismatch, fmt.Sprintf("prev %.16s… of the first kept line does not match the head %.16s… of the last line retention deleted (record seq %d)", s.prev, m.head, m.recordSeq)
	case signed && rep.SignedThrough < m.recordSeq:
		e.Reason, e.Detail = ReasonUnsigned, fmt.Sprintf("the retention record (seq %d) that says seq 1..%d were deleted is not covered by a signed checkpoint", m.recordSeq, m.through)
	default:
		return nil
	}
	return &e
}

// exportGap is one export_gap marker of an exported copy.
type exportGap struct {
	from, through uint64
	next          string // prev of the line after it (mid-chain markers)
	leading       bool   // before the first record: the chain start check covers it
	at            VerifyError
	closed        bool
}

// exportGaps are a copy's export_gap markers, in order.
type exportGaps []*exportGap

// add parses a marker; after records (started), it must continue at seq+1.
func (gs *exportGaps) add(line []byte, started bool, seq uint64, at VerifyError) (*exportGap, error) {
	var m struct {
		From    uint64 `json:"from_seq"`
		Through uint64 `json:"through_seq"`
	}
	if err := json.Unmarshal(line, &m); err != nil || m.From == 0 || m.Through < m.From {
		return nil, fmt.Errorf("export_gap marker without a valid from_seq..through_seq")
	}
	if started && m.From != seq+1 {
		return nil, fmt.Errorf("export_gap marker from seq %d, want %d", m.From, seq+1)
	}
	if g := gs.open(); g != nil {
		return nil, fmt.Errorf("export_gap marker right after another")
	}
	g := &exportGap{from: m.From, through: m.Through, leading: !started, at: at}
	*gs = append(*gs, g)
	return g, nil
}

// open returns the last marker if no record has followed it yet, and marks
// it followed.
func (gs exportGaps) open() *exportGap {
	if len(gs) == 0 || gs[len(gs)-1].closed {
		return nil
	}
	g := gs[len(gs)-1]
	g.closed = true
	return g
}

// check accepts each marker only where a retention record deleted exactly
// through its last seq, with the head the next line continues from (signed,
// with a key): the copy lacks only what the log itself no longer holds.
func (gs exportGaps) check(m *retentionMark, rep *Report, signed bool) error {
	for _, g := range gs {
		e := g.at
		r, ok := m.all[g.through]
		switch {
		case !g.closed:
			e.Reason, e.Detail = ReasonSeqGap, fmt.Sprintf("export_gap marker for seq %d..%d is the last line: nothing follows it", g.from, g.through)
		case !ok:
			e.Reason, e.Detail = ReasonSeqGap, fmt.Sprintf("export_gap marker: seq %d..%d are missing, and no retention record says the log deleted through seq %d", g.from, g.through, g.through)
		case !g.leading && r.head != g.next:
			e.Reason, e.Detail = ReasonPrevMismatch, fmt.Sprintf("the line after the export_gap marker has prev %.16s…, but retention recorded head %.16s… for seq %d", g.next, r.head, g.through)
		case signed && rep.SignedThrough < r.recordSeq:
			e.Reason, e.Detail = ReasonUnsigned, fmt.Sprintf("the retention record (seq %d) that accounts for the export_gap marker is not covered by a signed checkpoint", r.recordSeq)
		default:
			rep.ExportGaps++
			rep.ExportGapRecords += g.through - g.from + 1
			continue
		}
		return &e
	}
	return nil
}
