package audittest

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

func TestLogFailsAsTheWriterDoes(t *testing.T) {
	disk := errors.New("audit: writer failed: no space left on device")
	tests := []struct {
		name      string
		set       func(l *Log)
		wantLog   error
		wantRes   error
		wantErr   error
		wantKept  int
		wantCount int // Refused
	}{
		{"healthy", func(*Log) {}, nil, nil, nil, 1, 0},
		{"broken", func(l *Log) { l.Break(disk) }, disk, disk, disk, 0, 1},
		{"full", func(l *Log) { l.Refuse(Full) }, audit.ErrOverflow, nil, nil, 0, 1},
		{"no room", func(l *Log) { l.RefuseRoom(audit.ErrOverflow) }, nil, audit.ErrOverflow, nil, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &Log{}
			tt.set(l)
			if err := l.Log(&audit.Record{ID: "a", Kind: audit.KindHTTP}); !errors.Is(err, tt.wantLog) {
				t.Errorf("Log: got %v, want %v", err, tt.wantLog)
			}
			if _, err := l.Reserve(); !errors.Is(err, tt.wantRes) {
				t.Errorf("Reserve: got %v, want %v", err, tt.wantRes)
			}
			if err := l.Err(); !errors.Is(err, tt.wantErr) {
				t.Errorf("Err: got %v, want %v", err, tt.wantErr)
			}
			if got := len(l.Records()); got != tt.wantKept {
				t.Errorf("records kept: got %d, want %d", got, tt.wantKept)
			}
			if got := l.Refused(); got != tt.wantCount {
				t.Errorf("refused: got %d, want %d", got, tt.wantCount)
			}
		})
	}
}

func TestLogCountsReservations(t *testing.T) {
	l := &Log{}
	a, err := l.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := l.Reserve()
	if err := a.Log(&audit.Record{ID: "r1", Kind: audit.KindClose}); err != nil {
		t.Fatal(err)
	}
	a.Cancel() // used twice
	b.Cancel()
	l.Log(&audit.Record{ID: "r2", Kind: audit.KindHTTP})
	want := Reservations{Taken: 2, Logged: 1, Cancelled: 2, Reused: 1}
	if got := l.Reservations(); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if !l.Reserved("r1", audit.KindClose) || l.Reserved("r2", audit.KindHTTP) {
		t.Errorf("through a reservation: r1 %v r2 %v, want true false", l.Reserved("r1", audit.KindClose), l.Reserved("r2", audit.KindHTTP))
	}
}

func TestLogWaitFindsALateRecord(t *testing.T) {
	l := &Log{}
	go func() {
		time.Sleep(20 * time.Millisecond)
		l.Log(&audit.Record{ID: "late", Kind: audit.KindDrop})
	}()
	r := l.Wait(t, "the late drop", func(r audit.Record) bool { return r.Kind == audit.KindDrop })
	if r.ID != "late" {
		t.Fatalf("got %+v, want the late record", r)
	}
	if got := l.Kind(audit.KindDrop); len(got) != 1 {
		t.Fatalf("Kind: got %d records, want 1", len(got))
	}
	if r, ok := l.Last(func(audit.Record) bool { return true }); !ok || r.ID != "late" {
		t.Fatalf("Last: got %+v %v, want the late record", r, ok)
	}
}

func TestReadFileOfARealWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	w, err := audit.New(audit.Config{File: path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if err := w.Log(&audit.Record{ID: id, Kind: audit.KindHTTP, Decision: audit.DecisionAllow}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	recs := ReadLog(t, path)
	var ids []string
	for _, r := range recs {
		if r.Kind == audit.KindHTTP {
			ids = append(ids, r.ID)
		}
	}
	if len(ids) != 2 || ids[0] != "a" || ids[1] != "b" {
		t.Fatalf("got ids %v, want [a b]", ids)
	}
	if _, err := ReadFile(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("ReadFile of a missing file: got nil error")
	}
}
