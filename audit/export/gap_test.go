package export

import (
	"bytes"
	"context"
	"crypto/ed25519"
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
	pub := readPub(t, l.cfg.SigningKeyFile+".pub")
	rep, err := audit.VerifyFiles(audit.VerifyOptions{PublicKey: pub, Complete: true}, out)
	if err != nil || rep.FirstSeq != first || rep.ExportGaps != 1 || rep.ExportGapRecords != first-1 {
		t.Fatalf("copy with the marker: report %+v, err %v; want it to start at %d with one gap of %d", rep, err, first, first-1)
	}
}

// TestExportGapMidChainVerifies: records are shipped, the collector goes
// down, retention deletes files the exporter had not reached, the collector
// comes back. The copy holds the first records, one gap marker and the rest,
// and verifies (the retention record accounts for the gap).
func TestExportGapMidChainVerifies(t *testing.T) {
	l := newTestLog(t, 0)
	out := filepath.Join(t.TempDir(), "copy.jsonl")
	state := filepath.Join(t.TempDir(), "state")
	l.write(20)
	shipAll(t, l, &fileReceiver{path: out}, FormatJSONL, state)
	shipped := l.head()
	l.close()
	// The collector is down while the log grows and retention runs.
	l2 := reopen(t, l, 1)
	l2.write(150)
	l2.close()
	files, _ := audit.ChainFiles(l.cfg.File)
	first, _, err := firstSeq(files[0])
	if err != nil || first <= shipped+1 {
		t.Fatalf("oldest kept file starts at seq %d (%v): want retention past the %d shipped", first, err, shipped)
	}
	s := shipAll(t, l2, &fileReceiver{path: out}, FormatJSONL, state)
	if st := s.Stats(); st.GapRecords != first-shipped-1 {
		t.Fatalf("got %d gap records, want %d", st.GapRecords, first-shipped-1)
	}
	rep, err := audit.VerifyFiles(audit.VerifyOptions{PublicKey: readPub(t, l.cfg.SigningKeyFile+".pub"), Complete: true}, out)
	if err != nil || rep.ExportGaps != 1 || rep.FirstSeq != 1 || rep.LastSeq != l2.head() {
		t.Fatalf("copy: report %+v, err %v; want seq 1..%d with one export gap", rep, err, l2.head())
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

// reopen opens l's log again with retention maxFiles.
func reopen(t *testing.T, l *testLog, maxFiles int) *testLog {
	t.Helper()
	cfg := l.cfg
	cfg.MaxFiles = maxFiles
	w, err := audit.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	l2 := &testLog{t: t, cfg: cfg, w: w, n: l.n}
	t.Cleanup(func() { l2.w.Close() })
	return l2
}

func readPub(t *testing.T, path string) ed25519.PublicKey {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := audit.ParsePublicKey(b)
	if err != nil {
		t.Fatal(err)
	}
	return pub
}
