package audit

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// TestWriterStampsNode: every line the writer writes, checkpoints and its
// own records included, carries Config.Node, whatever the caller put in
// Record.Node, and the chain covers it: a line whose node is changed (a
// record passed off as another node's) fails verify at that line.
func TestWriterStampsNode(t *testing.T) {
	cfg := testConfig(t)
	cfg.Node = "node-a.cluster"
	cfg.CheckpointEvery = 4
	w, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		r := sampleRecord(i)
		r.Node = "forged-by-caller"
		if err := w.Log(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, cfg.File)
	var ckpts int
	for i, line := range lines {
		r := decodeLine(t, line)
		if r.Node != cfg.Node {
			t.Errorf("line %d: got node %q, want %q", i+1, r.Node, cfg.Node)
		}
		if r.Kind == KindCheckpoint {
			ckpts++
		}
		if !bytes.Contains(line, []byte(`,"id":"`)) || !bytes.Contains(line, []byte(`","node":"node-a.cluster",`)) {
			t.Errorf("line %d: node not right after id: %s", i+1, line)
		}
	}
	if ckpts < 3 {
		t.Errorf("got %d checkpoints, want at least 3 (every 4 records and at close)", ckpts)
	}
	opts := VerifyOptions{PublicKey: w.PublicKey(), Complete: true}
	if _, err := Verify(opts, Input{Name: "log", R: bytes.NewReader(join(lines))}); err != nil {
		t.Fatalf("verify the intact log: %v", err)
	}
	forged := cloneLines(lines)
	forged[2] = bytes.Replace(forged[2], []byte(`"node":"node-a.cluster"`), []byte(`"node":"node-b.cluster"`), 1)
	_, err = Verify(opts, Input{Name: "log", R: bytes.NewReader(join(forged))})
	var ve *VerifyError
	if !errors.As(err, &ve) || ve.Line != 4 {
		t.Fatalf("verify a log with line 3's node changed: got %v, want a break at line 4 (its prev no longer matches)", err)
	}
}

// TestWriterNoNode: without Config.Node the field is left out, and a
// caller's value is still not written.
func TestWriterNoNode(t *testing.T) {
	cfg := testConfig(t)
	w, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Log(&Record{Kind: KindHTTP, Decision: DecisionAllow, Node: "forged"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for i, line := range readLines(t, cfg.File) {
		if bytes.Contains(line, []byte(`"node"`)) {
			t.Errorf("line %d: %s: want no node", i+1, line)
		}
	}
}

func TestQueryByNode(t *testing.T) {
	lines := [][]byte{}
	for _, node := range []string{"node-a", "node-b"} {
		cfg := testConfig(t)
		cfg.Node = node
		cfg.SigningKeyFile = ""
		writeRecords(t, cfg, 3)
		lines = append(lines, readLines(t, cfg.File)...)
	}
	// Two nodes' streams merged by a collector: a query picks one node's.
	var got []string
	err := QueryReader(t.Context(), "merged", bytes.NewReader(join(lines)), Filter{Node: "node-b"}, func(r *Record) error {
		got = append(got, r.Node)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || strings.Join(got, ",") != "node-b,node-b,node-b" {
		t.Errorf("got %v, want node-b's 3 records", got)
	}
}

func TestConfigValidateNode(t *testing.T) {
	for _, tc := range []struct {
		name, node string
		ok         bool
	}{
		{"empty", "", true},
		{"kubernetes node", "ip-10-0-1-17.eu-west-1.compute.internal", true},
		{"underscore", "worker_3", true},
		{"space", "node a", false},
		{"quote", `node"a`, false},
		{"newline", "node\na", false},
		{"non-ascii", "nœud", false},
		{"too long", strings.Repeat("a", 254), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Node = tc.node
			cfg.applyDefaults()
			err := cfg.Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate(node %q): got %v, want ok %v", tc.node, err, tc.ok)
			}
			if err != nil && !strings.Contains(err.Error(), "audit: node") {
				t.Errorf("error %q does not name audit node", err)
			}
		})
	}
}
