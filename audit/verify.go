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
	var (
		rep        Report
		prev       = GenesisPrev
		prevWhere  = "genesis"
		seq        uint64
		started    bool
		firstUnsig *VerifyError // first record after the last valid checkpoint
		wantKeyID  string
		start      *chainStart // set when the chain does not start at seq 1
		pruned     retentionMark
	)
	if opts.PublicKey != nil {
		if len(opts.PublicKey) != ed25519.PublicKeySize {
			return rep, fmt.Errorf("audit: public key has %d bytes, want %d", len(opts.PublicKey), ed25519.PublicKeySize)
		}
		wantKeyID = KeyID(opts.PublicKey)
		rep.SignaturesChecked = true
	}
	var hexBuf [64]byte
	for _, in := range inputs {
		rep.Files++
		lr := newLineReader(in.R)
		for n := 1; ; n++ {
			bad := func(reason, format string, args ...any) (Report, error) {
				return rep, &VerifyError{File: in.Name, Line: n, Reason: reason, Detail: fmt.Sprintf(format, args...)}
			}
			line, complete, err := lr.next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return bad(ReasonRead, "%v", err)
			}
			if !complete {
				return bad(ReasonTornTail, "last line has no newline (%d bytes): a write was cut short; the file is good up to line %d", len(line), n-1)
			}
			var r Record
			if err := json.Unmarshal(line, &r); err != nil {
				return bad(ReasonBadJSON, "%v", err)
			}
			if err := checkShape(&r); err != nil {
				return bad(ReasonBadRecord, "%v", err)
			}
			if !started {
				started = true
				rep.FirstSeq = r.Seq
				switch {
				case opts.Partial:
					seq, prev = r.Seq-1, r.Prev
				case r.Seq == 1 && r.Prev != GenesisPrev:
					return bad(ReasonPrevMismatch, "the first record's prev %.16s… is not the genesis prev", r.Prev)
				case r.Seq != 1:
					// Retention may have deleted what came before: a retention
					// record later in the chain must say so (checked at the end).
					start = &chainStart{seq: r.Seq, prev: r.Prev, at: VerifyError{File: in.Name, Line: n}}
					seq, prev = r.Seq-1, r.Prev
				}
			}
			if r.Seq != seq+1 {
				return bad(ReasonSeqGap, "seq %d, want %d (a line was removed, inserted or moved)", r.Seq, seq+1)
			}
			if r.Prev != prev {
				return bad(ReasonPrevMismatch, "prev %.16s… does not match SHA-256 %.16s… of %s (that line was altered, or a line was removed or inserted here)", r.Prev, prev, prevWhere)
			}
			if r.Kind == KindCheckpoint {
				c := r.Checkpoint
				if c.Head != r.Prev {
					return bad(ReasonBadCheckpoint, "head %.16s… does not match the chain's %.16s…", c.Head, r.Prev)
				}
				if c.Seq != r.Seq-1 {
					return bad(ReasonBadCheckpoint, "upto_seq %d, want %d", c.Seq, r.Seq-1)
				}
				if opts.PublicKey != nil {
					if c.KeyID != wantKeyID {
						return bad(ReasonBadSignature, "signed by key_id %s, want %s (the given public key)", c.KeyID, wantKeyID)
					}
					sig, err := base64.StdEncoding.DecodeString(c.Signature)
					if err != nil || !ed25519.Verify(opts.PublicKey, CheckpointMessage(c.Seq, c.Head), sig) {
						return bad(ReasonBadSignature, "Ed25519 signature over seq %d does not verify with the given public key", c.Seq)
					}
					rep.SignedThrough = c.Seq
					rep.Unsigned = 0
					firstUnsig = nil
				}
				rep.Checkpoints++
				if start != nil && rep.AnchorSeq == 0 {
					rep.AnchorSeq = c.Seq
				}
			} else {
				if r.Kind == KindRetention {
					if err := pruned.add(&r); err != nil {
						return bad(ReasonBadRecord, "%v", err)
					}
				}
				rep.Records++
				rep.Unsigned++
				if opts.Each != nil {
					opts.Each(&r)
				}
				if firstUnsig == nil {
					firstUnsig = &VerifyError{File: in.Name, Line: n}
				}
			}
			sum := sha256.Sum256(line)
			hex.Encode(hexBuf[:], sum[:])
			prev = string(hexBuf[:])
			prevWhere = fmt.Sprintf("line %d", n)
			seq = r.Seq
			rep.Lines++
			rep.LastSeq = r.Seq
			rep.Head = prev
		}
		prevWhere = "the last line of " + in.Name
	}
	rep.PrunedThrough, rep.PrunedFiles = pruned.through, pruned.files
	if start != nil {
		if err := start.check(&pruned, &rep, opts.PublicKey != nil); err != nil {
			return rep, err
		}
	}
	if opts.PublicKey == nil {
		rep.Unsigned = rep.Records
	} else if opts.Complete && rep.Unsigned > 0 {
		firstUnsig.Reason = ReasonUnsigned
		firstUnsig.Detail = fmt.Sprintf("%d records from here on are not followed by a signed checkpoint, but a stopped writer ends every file with one: the file was cut short (or its writer crashed, or is still running)", rep.Unsigned)
		return rep, firstUnsig
	} else if opts.MaxUnsigned >= 0 && rep.Unsigned > opts.MaxUnsigned {
		firstUnsig.Reason = ReasonUnsigned
		firstUnsig.Detail = fmt.Sprintf("%d records from here on are not covered by a checkpoint signed with the given key (limit %d): the chain may have been rewritten without the key", rep.Unsigned, opts.MaxUnsigned)
		return rep, firstUnsig
	}
	return rep, nil
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
