package export

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/airlock-dev/airlock/audit"
)

// Event is one thing to ship: a record of the chain (Line, with its Record
// decoded) or, when Gap is set, a marker for records that could not be read.
type Event struct {
	// Line is the record's line as written, without its newline.
	Line []byte
	// Record is Line decoded.
	Record audit.Record
	// Hash is the hex SHA-256 of Line: the next record's prev.
	Hash string
	// Gap, when set, stands for records that are gone (Line is nil).
	Gap *Gap
}

// Gap is a run of seqs the exporter could not ship: retention deleted them
// (or the files were removed) before they were read.
type Gap struct {
	From    uint64 `json:"from_seq"`
	Through uint64 `json:"through_seq"`
	Reason  string `json:"reason"`
}

// GapKind is the kind of the marker line a JSONL sink writes for a Gap. It
// is not a record of the chain; audit.Verify accepts it where a retention
// record of the chain accounts for the missing seqs.
const GapKind = audit.KindExportGap

// Seq is the seq the event stands for: the record's, or the gap's last.
func (e *Event) Seq() uint64 {
	if e.Gap != nil {
		return e.Gap.Through
	}
	return e.Record.Seq
}

// newEvent decodes one line of the chain.
func newEvent(line []byte) (Event, error) {
	e := Event{Line: append([]byte(nil), line...)}
	if err := json.Unmarshal(line, &e.Record); err != nil {
		return e, fmt.Errorf("bad audit line: %w", err)
	}
	if e.Record.Seq == 0 {
		return e, fmt.Errorf("bad audit line: seq missing or zero")
	}
	sum := sha256.Sum256(line)
	e.Hash = hex.EncodeToString(sum[:])
	return e, nil
}

// gapLine is the JSONL marker for g.
func gapLine(g *Gap) []byte {
	b, _ := json.Marshal(struct {
		Kind string `json:"kind"`
		*Gap
	}{GapKind, g})
	return b
}
