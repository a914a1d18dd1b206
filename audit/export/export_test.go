package export

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/export/exporttest"
)

// testLog is a real audit writer with small files, so a few dozen records
// rotate several times.
type testLog struct {
	t   testing.TB
	cfg audit.Config
	w   *audit.Writer
	n   int
}

func newTestLog(t testing.TB, maxFiles int) *testLog {
	t.Helper()
	dir := t.TempDir()
	cfg := audit.Config{File: filepath.Join(dir, "audit.jsonl"), SigningKeyFile: filepath.Join(dir, "audit.key"),
		MaxSize: 4096, CheckpointEvery: 7, MaxFiles: maxFiles, SyncInterval: 5 * time.Millisecond}
	w, err := audit.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := &testLog{t: t, cfg: cfg, w: w}
	t.Cleanup(func() { l.w.Close() })
	return l
}

// write appends n records (allow and deny, http and dns) and syncs them.
func (l *testLog) write(n int) {
	l.t.Helper()
	for range n {
		i := l.n
		l.n++
		r := &audit.Record{ID: fmt.Sprintf("req-%d", i), Sandbox: "sb-1", Owner: "1000", PolicyRev: "rev-7",
			Kind: audit.KindHTTP, Decision: audit.DecisionAllow, Host: "pypi.org", Port: 443, Method: "GET", Path: fmt.Sprintf("/simple/p%d/", i), Status: 200,
			Reasons: []audit.Reason{{ID: "allow_host", Msg: "pypi.org is allowed"}}}
		if i%3 == 1 {
			r.Decision, r.Host, r.Status = audit.DecisionDeny, "evil.example", 0
			r.Reasons = []audit.Reason{{ID: "host_not_allowed", Msg: `evil.example is not "allowed"]`}}
		}
		if i%3 == 2 {
			r.Kind, r.Method, r.Path, r.Status, r.QName, r.QType, r.RCode = audit.KindDNS, "", "", 0, "pypi.org.", "A", "NOERROR"
		}
		if err := l.w.Log(r); err != nil {
			l.t.Fatal(err)
		}
	}
	if err := l.w.Sync(); err != nil {
		l.t.Fatal(err)
	}
}

// head is the seq of the chain's last line.
func (l *testLog) head() uint64 {
	l.t.Helper()
	files, err := audit.ChainFiles(l.cfg.File)
	if err != nil {
		l.t.Fatal(err)
	}
	rep, err := audit.VerifyFiles(audit.VerifyOptions{MaxUnsigned: -1, Partial: true}, files...)
	if err != nil {
		l.t.Fatal(err)
	}
	return rep.LastSeq
}

// files counts the chain's files.
func (l *testLog) files() int {
	l.t.Helper()
	files, err := audit.ChainFiles(l.cfg.File)
	if err != nil {
		l.t.Fatal(err)
	}
	return len(files)
}

func (l *testLog) close() {
	l.t.Helper()
	if err := l.w.Close(); err != nil {
		l.t.Fatal(err)
	}
}

// runShipper starts a following Shipper of l to rc; stop cancels it and
// waits for Run to return.
func runShipper(t *testing.T, l *testLog, rc exporttest.Receiver, format, state string) (s *Shipper, stop func()) {
	t.Helper()
	cfg := Config{Format: format, Endpoint: rc.Endpoint(), TLS: TLS{CAFile: rc.CAFile(), ServerName: rc.TLSName()}, StateFile: state, BatchSize: 7,
		FlushInterval: 10 * time.Millisecond, BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond, Timeout: 5 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	sink, err := NewSink(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err = New(cfg, ReadOptions{Live: l.cfg.File, Follow: true, Poll: 5 * time.Millisecond}, sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		sink.Close()
	}
	t.Cleanup(stop)
	return s, stop
}

// waitFor polls cond for up to 30 s (bounded; the machine is shared).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func lastReceivedSeq(rc exporttest.Receiver) uint64 {
	lines := rc.Got().Lines()
	if len(lines) == 0 {
		return 0
	}
	var r audit.Record
	json.Unmarshal(lines[len(lines)-1], &r)
	return r.Seq
}

// checkCollected asserts every seq 1..head arrived exactly once, in order,
// and that the collected lines, as a JSONL file, verify as the chain with
// the writer's key.
func checkCollected(t *testing.T, rc exporttest.Receiver, head uint64, pubFile string) {
	t.Helper()
	lines := rc.Got().Lines()
	for i, line := range lines {
		var r audit.Record
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if r.Seq != uint64(i+1) {
			t.Fatalf("line %d has seq %d, want %d (lost, repeated or out of order)", i+1, r.Seq, i+1)
		}
	}
	if uint64(len(lines)) != head {
		t.Fatalf("got %d records, want %d", len(lines), head)
	}
	copyPath := filepath.Join(t.TempDir(), "collected.jsonl")
	if err := os.WriteFile(copyPath, append(bytes.Join(lines, []byte("\n")), '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(pubFile)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := audit.ParsePublicKey(b)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := audit.VerifyFiles(audit.VerifyOptions{PublicKey: pub, Complete: true}, copyPath)
	if err != nil {
		t.Fatalf("collected copy does not verify: %v", err)
	}
	if rep.LastSeq != head || !rep.SignaturesChecked {
		t.Fatalf("verified through seq %d (signatures %v), want %d", rep.LastSeq, rep.SignaturesChecked, head)
	}
}

// TestExportSurvivesCollectorOutageAndRestart: records shipped, the
// collector goes down while records (and rotations) keep coming, the
// exporter is restarted while it is down, the collector comes back: every
// record arrives exactly once, in order, and the collected copy verifies.
func TestExportSurvivesCollectorOutageAndRestart(t *testing.T) {
	tests := []struct {
		name   string
		format string
		rc     func(t *testing.T) exporttest.Receiver
	}{
		{name: "otlp http", format: FormatOTLP, rc: func(t *testing.T) exporttest.Receiver { return exporttest.NewOTLPHTTP(t) }},
		{name: "otlp https", format: FormatOTLP, rc: func(t *testing.T) exporttest.Receiver { return exporttest.NewOTLPHTTPS(t) }},
		{name: "otlp grpc", format: FormatOTLP, rc: func(t *testing.T) exporttest.Receiver { return exporttest.NewOTLPGRPC(t) }},
		{name: "syslog tcp", format: FormatSyslog, rc: func(t *testing.T) exporttest.Receiver { return exporttest.NewSyslog(t, false) }},
		{name: "syslog tls", format: FormatSyslog, rc: func(t *testing.T) exporttest.Receiver { return exporttest.NewSyslog(t, true) }},
		{name: "jsonl file", format: FormatJSONL, rc: func(t *testing.T) exporttest.Receiver {
			return &fileReceiver{path: filepath.Join(t.TempDir(), "copy.jsonl")}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newTestLog(t, 0)
			rc := tt.rc(t)
			state := filepath.Join(t.TempDir(), "export.state")
			l.write(30)
			s, stop := runShipper(t, l, rc, tt.format, state)
			waitFor(t, "the first records", func() bool { return lastReceivedSeq(rc) >= l.head() })

			rc.SetDown(true)
			before := l.files()
			l.write(40)
			if tt.format != FormatJSONL {
				waitFor(t, "a failed attempt", func() bool { return s.Stats().Failed > 0 })
			}
			stop() // the daemon restarts while the collector is down
			l.write(30)
			if after := l.files(); after < before+2 {
				t.Fatalf("got %d files after the outage, %d before: want rotations while the collector is down", after, before)
			}
			rc.SetDown(false)
			s2, _ := runShipper(t, l, rc, tt.format, state)
			l.write(20)
			l.close()
			head := l.head()
			waitFor(t, "every record", func() bool { return lastReceivedSeq(rc) >= head && s2.Stats().LastSeq >= head })
			checkCollected(t, rc, head, l.cfg.SigningKeyFile+".pub")
			if st := s2.Stats(); st.LastSeq != head || st.GapRecords != 0 {
				t.Fatalf("got stats %+v, want last seq %d and no gap", st, head)
			}
			waitFor(t, "lag 0", func() bool { return s2.Stats().Lag == 0 })
		})
	}
}
