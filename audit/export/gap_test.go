package export

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/export/exporttest"
)

// TestExportMarksRecordsRetentionDeletedBeforeShipping: retention deletes
// rotated files the exporter never shipped (the collector was down the whole
// time). The exporter sends one gap marker naming the lost seqs, counts
// them, and ships the rest; the rest (without the marker) verifies, the
// retention record accounting for the front.
func TestExportMarksRecordsRetentionDeletedBeforeShipping(t *testing.T) {
	l := newTestLog(t, 1)
	l.write(120)
	l.close()
	files, err := audit.ChainFiles(l.cfg.File)
	if err != nil {
		t.Fatal(err)
	}
	first, _, err := firstSeq(files[0])
	if err != nil || first < 2 {
		t.Fatalf("oldest kept file starts at seq %d (%v): want retention to have deleted some", first, err)
	}
	out := filepath.Join(t.TempDir(), "copy.jsonl")
	cfg := Config{Format: FormatJSONL, Endpoint: out, StateFile: filepath.Join(t.TempDir(), "state"), BatchSize: 10, FlushInterval: time.Millisecond}
	sink, err := NewSink(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	s, err := New(cfg, ReadOptions{Live: l.cfg.File}, sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
	var g struct {
		Kind string `json:"kind"`
		Gap
	}
	if err := json.Unmarshal(lines[0], &g); err != nil || g.Kind != GapKind || g.From != 1 || g.Through != first-1 {
		t.Fatalf("got first line %s, want a %s marker for seq 1..%d", lines[0], GapKind, first-1)
	}
	if st := s.Stats(); st.GapRecords != first-1 || st.LastSeq != l.head() || st.Shipped != l.head()-first+1 {
		t.Fatalf("got stats %+v, want %d gap records, %d shipped through seq %d", st, first-1, l.head()-first+1, l.head())
	}
	rest := filepath.Join(t.TempDir(), "rest.jsonl")
	if err := os.WriteFile(rest, append(bytes.Join(lines[1:], []byte("\n")), '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := audit.VerifyFiles(audit.VerifyOptions{MaxUnsigned: -1}, rest)
	if err != nil || rep.FirstSeq != first || rep.PrunedThrough != first-1 {
		t.Fatalf("copy after the marker: report %+v, err %v; want it to start at %d, retention through %d", rep, err, first, first-1)
	}
}

// TestExportNeverBlocksTheWriter: a collector that takes requests and never
// answers stalls the exporter, not the log: the writer keeps appending and
// syncing every record.
func TestExportNeverBlocksTheWriter(t *testing.T) {
	l := newTestLog(t, 0)
	rc := exporttest.NewOTLPHTTP(t)
	rc.Hang.Store(true)
	s, stop := runShipper(t, l, rc, FormatOTLP, filepath.Join(t.TempDir(), "state"))
	defer stop()
	l.write(5)
	waitFor(t, "the exporter to be stuck on the collector", func() bool { return rc.Held() > 0 })
	l.write(300)
	if head := l.head(); head < 305 {
		t.Fatalf("writer reached seq %d, want at least 305 while the collector hangs", head)
	}
	if st := s.Stats(); st.Shipped != 0 || st.Lag < 305 {
		t.Fatalf("got %d shipped, lag %d, to a collector that never answers; want 0 shipped, lag at least 305", st.Shipped, st.Lag)
	}
}
