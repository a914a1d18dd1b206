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
				if opts.Partial {
					seq, prev = r.Seq-1, r.Prev
				} else if r.Seq != 1 || r.Prev != GenesisPrev {
					return bad(ReasonSeqGap, "chain starts at seq %d with prev %.16s…, want seq 1 with the genesis prev (give the older rotated files first, or verify a partial chain)", r.Seq, r.Prev)
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
			} else {
				rep.Records++
				rep.Unsigned++
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
