package inspect

import (
	"bytes"
	"go/build"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

func TestAutomaton(t *testing.T) {
	a := newAutomaton([]string{"akia", "ghp_", "kia", "he", "she", "hers"}, nil)
	type hit struct{ p, end int }
	var got []hit
	runs := a.scan([]byte("xAKIAx uSHErs ghp_ABCDEFGHIJKLMNOPQRST"), func(p, end int) { got = append(got, hit{p, end}) })
	want := []hit{{0, 5}, {2, 5}, {4, 11}, {3, 11}, {5, 13}, {1, 18}}
	if !slices.Equal(got, want) {
		t.Errorf("hits: got %v, want %v", got, want)
	}
	if len(runs) != 1 || runs[0] != (span{14, 38}) {
		t.Errorf("token runs: got %v, want [{14 38}]", runs)
	}
}

// TestAutomatonBoundary: a boundary pattern hits only after a non-word
// byte or at the start, on the plain walk and the lanes alike.
func TestAutomatonBoundary(t *testing.T) {
	a := newAutomaton([]string{"s.", "ey", "hvs."}, []bool{true, false, true})
	in := []byte("s.a this.x (s.b) key hvs.1 ahvs.2 _s.c S.d")
	var got [][2]int
	a.walk(in, func(p, end int) { got = append(got, [2]int{p, end}) })
	want := [][2]int{{0, 2}, {0, 14}, {1, 20}, {2, 25}, {0, 41}}
	if !slices.Equal(got, want) {
		t.Errorf("hits: got %v, want %v", got, want)
	}
	long := slices.Concat(bytes.Repeat([]byte("this.x s.y "), 200), in)
	var lanes, plain [][2]int
	a.scan(long, func(p, end int) { lanes = append(lanes, [2]int{p, end}) })
	a.walk(long, func(p, end int) { plain = append(plain, [2]int{p, end}) })
	if !slices.Equal(lanes, plain) || len(plain) != 200+len(want) {
		t.Errorf("lanes: %d hits, walk %d, want %d", len(lanes), len(plain), 200+len(want))
	}
}

// BenchmarkAutomaton is the one pass every scan makes: keywords and token
// runs over Go source.
func BenchmarkAutomaton(b *testing.B) {
	rs, err := defaultRules()
	if err != nil {
		b.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(build.Default.GOROOT, "src", "net", "http", "server.go"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	for b.Loop() {
		rs.ac.scan(data, func(int, int) {})
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	if cpu := time.Duration(ru1.Utime.Nano() - ru0.Utime.Nano()); cpu > 0 {
		b.ReportMetric(float64(len(data))*float64(b.N)/cpu.Seconds()/1e6, "MB/cpu-s")
	}
}
