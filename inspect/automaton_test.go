package inspect

import (
	"go/build"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

func TestAutomaton(t *testing.T) {
	a := newAutomaton([]string{"akia", "ghp_", "kia", "he", "she", "hers"})
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
