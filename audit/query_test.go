package audit

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestQuery(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxSize = 4096 // several rotated files
	w, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2025, 5, 1, 0, 0, 0, 0, time.UTC)
	for i := range 60 {
		r := sampleRecord(i)
		r.TS = base.Add(time.Duration(i) * time.Minute)
		if i%3 == 2 {
			r.Host, r.QName = "", "evil.example."
		}
		if i%4 == 0 {
			r.Owner = "1000"
		}
		if err := w.Log(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	files, err := ChainFiles(cfg.File)
	if err != nil || len(files) < 2 {
		t.Fatalf("chain files: got %v, %v; want rotated siblings", files, err)
	}
	tests := []struct {
		name string
		f    Filter
		want int
	}{
		{"all", Filter{}, 60},
		{"sandbox", Filter{Sandbox: "sb-1"}, 20},
		{"owner", Filter{Owner: "1000"}, 15},
		{"owner and sandbox", Filter{Owner: "1000", Sandbox: "sb-0"}, 5},
		{"other owner", Filter{Owner: "0"}, 0},
		{"kind", Filter{Kind: KindConnect}, 20},
		{"decision", Filter{Decision: DecisionDeny}, 30},
		{"host exact", Filter{Host: "pypi.org"}, 20},
		{"host exact is not suffix", Filter{Host: "pythonhosted.org"}, 0},
		{"host suffix dot", Filter{Host: ".pythonhosted.org"}, 20},
		{"host suffix star", Filter{Host: "*.pythonhosted.org"}, 20},
		{"host suffix includes apex", Filter{Host: ".pypi.org"}, 20},
		{"host from qname", Filter{Host: "EVIL.example."}, 20},
		{"since", Filter{Since: base.Add(50 * time.Minute)}, 10},
		{"until", Filter{Until: base.Add(10 * time.Minute)}, 10},
		{"window and kind", Filter{Since: base.Add(30 * time.Minute), Until: base.Add(36 * time.Minute), Kind: KindHTTP}, 2},
		{"checkpoints only", Filter{Kind: KindCheckpoint}, -1},
		{"no match", Filter{Sandbox: "sb-9"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := 0
			err := Query(context.Background(), files, tt.f, func(r *Record) error {
				if !tt.f.Match(r) {
					t.Errorf("fn got a record the filter rejects: %+v", r)
				}
				got++
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if tt.want < 0 {
				if got == 0 {
					t.Fatal("got no checkpoints, want some")
				}
				return
			}
			if got != tt.want {
				t.Fatalf("got %d records, want %d", got, tt.want)
			}
		})
	}
	t.Run("stops on fn error", func(t *testing.T) {
		stop := errors.New("stop")
		n := 0
		err := Query(context.Background(), files, Filter{}, func(*Record) error { n++; return stop })
		if !errors.Is(err, stop) || n != 1 {
			t.Fatalf("got %v after %d records, want stop after 1", err, n)
		}
	})
	t.Run("bad line named", func(t *testing.T) {
		p := cfg.File + ".bad"
		os.WriteFile(p, []byte("{\"seq\":1,\"kind\":\"http\"}\nnope\n"), 0o600)
		err := Query(context.Background(), []string{p}, Filter{}, func(*Record) error { return nil })
		if err == nil || !strings.Contains(err.Error(), p+":2") {
			t.Fatalf("got %v, want an error naming %s:2", err, p)
		}
	})
	t.Run("torn tail skipped", func(t *testing.T) {
		p := cfg.File + ".torn"
		os.WriteFile(p, []byte("{\"seq\":1,\"kind\":\"http\"}\n{\"seq\":2,"), 0o600)
		n := 0
		if err := Query(context.Background(), []string{p}, Filter{}, func(*Record) error { n++; return nil }); err != nil || n != 1 {
			t.Fatalf("got %d, %v; want 1 record and no error", n, err)
		}
	})
}

func TestTail(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxSize = 4096
	cfg.SyncInterval = 5 * time.Millisecond
	w, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := range 5 {
		w.Log(sampleRecord(i))
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	t.Run("last lines", func(t *testing.T) {
		var got []string
		err := Tail(context.Background(), cfg.File, TailOptions{Lines: 2}, func(l []byte) error {
			got = append(got, string(l))
			return nil
		})
		if err != nil || len(got) != 2 || !strings.HasPrefix(got[0], `{"seq":4,`) || !strings.HasPrefix(got[1], `{"seq":5,`) {
			t.Fatalf("got %q, %v; want seq 4 and 5", got, err)
		}
	})
	t.Run("follow across rotation", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var mu sync.Mutex
		var seqs []string
		done := make(chan error, 1)
		go func() {
			done <- Tail(ctx, cfg.File, TailOptions{Lines: -1, Follow: true, Poll: 5 * time.Millisecond}, func(l []byte) error {
				mu.Lock()
				seqs = append(seqs, string(l[:strings.IndexByte(string(l), ',')]))
				mu.Unlock()
				return nil
			})
		}()
		// Tail must have the live file open before it rotates, or it starts at
		// the new one (regression: a slow goroutine start made this flaky).
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			mu.Lock()
			n := len(seqs)
			mu.Unlock()
			if n >= 5 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("tail emitted fewer than the 5 existing lines within 10s")
			}
		}
		// Enough records to rotate the 4 KiB file several times.
		const more = 80
		for i := range more {
			if err := w.Log(sampleRecord(i)); err != nil {
				t.Fatal(err)
			}
			if i%10 == 0 {
				w.Sync()
			}
		}
		w.Sync()
		if w.Stats().Rotations == 0 {
			t.Fatal("no rotation happened")
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			n := len(seqs)
			mu.Unlock()
			if n >= more+5 || time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		// Every line from seq 1 on, checkpoints included, in order, none missed.
		var want uint64 = 1
		records := 0
		for _, s := range seqs {
			if s != `{"seq":`+strconv.FormatUint(want, 10) {
				t.Fatalf("tail order: got %s, want seq %d (all: %v)", s, want, seqs)
			}
			want++
			records++
		}
		if records < more+5 {
			t.Fatalf("tail saw %d lines, want at least %d", records, more+5)
		}
	})
}
