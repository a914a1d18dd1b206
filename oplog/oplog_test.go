package oplog

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
)

func TestForScopesAComponent(t *testing.T) {
	var b bytes.Buffer
	For(slog.New(slog.NewJSONHandler(&b, nil)), "gateway").Error("x", ErrorKey, errors.New("boom"))
	var line map[string]any
	if err := json.Unmarshal(b.Bytes(), &line); err != nil {
		t.Fatal(err)
	}
	if line[ComponentKey] != "gateway" || line[ErrorKey] != "boom" {
		t.Fatalf("got %v, want component gateway and error boom", line)
	}
}

func TestForNilDiscards(t *testing.T) {
	l := For(nil, "audit")
	if l.Enabled(t.Context(), slog.LevelError) {
		t.Fatal("got a logger that logs, want one that discards")
	}
}
