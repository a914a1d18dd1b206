package export

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit/export/exporttest"
)

// shipAll runs a non-following Shipper of l's chain to rc until it is done.
func shipAll(t *testing.T, l *testLog, rc exporttest.Receiver, format, state string) *Shipper {
	t.Helper()
	cfg := Config{Format: format, Endpoint: rc.Endpoint(), StateFile: state, BatchSize: 4, FlushInterval: time.Millisecond}
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
	return s
}

// TestExportJSONLFileCrashBeforeStateWriteRepeatsNothing: the daemon dies
// after a JSONL file sink fsynced a batch and before the state file recorded
// it (the state file is put back one batch). The next run resumes after the
// file's own last record: each record is in the copy once, and it verifies.
func TestExportJSONLFileCrashBeforeStateWriteRepeatsNothing(t *testing.T) {
	l := newTestLog(t, 0)
	rc := &fileReceiver{path: filepath.Join(t.TempDir(), "copy.jsonl")}
	state := filepath.Join(t.TempDir(), "state")
	l.write(20)
	shipAll(t, l, rc, FormatJSONL, state)
	lines := rc.Got().Lines()
	if err := saveState(state, FormatJSONL, Position{Seq: uint64(len(lines) - 4)}); err != nil {
		t.Fatal(err)
	}
	l.write(10)
	l.close()
	shipAll(t, l, rc, FormatJSONL, state)
	checkCollected(t, rc, l.head(), l.cfg.SigningKeyFile+".pub")
}

// TestExportOTLPCrashBeforeStateWriteRepeatsOneBatch pins the documented
// window for a collector: after a crash between its acknowledgement and the
// state write, exactly the records after the saved position are sent again,
// with the same seq and hash, and nothing else.
func TestExportOTLPCrashBeforeStateWriteRepeatsOneBatch(t *testing.T) {
	l := newTestLog(t, 0)
	rc := exporttest.NewOTLPHTTP(t)
	state := filepath.Join(t.TempDir(), "state")
	l.write(20)
	l.close()
	shipAll(t, l, rc, FormatOTLP, state)
	first := rc.Got().Lines()
	const batch = 4
	if err := saveState(state, FormatOTLP, Position{Seq: uint64(len(first) - batch)}); err != nil {
		t.Fatal(err)
	}
	shipAll(t, l, rc, FormatOTLP, state)
	all := rc.Got().Lines()
	if len(all) != len(first)+batch {
		t.Fatalf("got %d lines after the restart, want %d (one batch of %d again)", len(all), len(first)+batch, batch)
	}
	for i, line := range all[len(first):] {
		if want := first[len(first)-batch+i]; string(line) != string(want) {
			t.Fatalf("repeated line %d: got %s, want %s", i, line, want)
		}
	}
}
