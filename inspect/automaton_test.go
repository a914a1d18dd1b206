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

// TestAutomatonSplit: the two-halves walk of a long input reports exactly
// the hits and token runs of a one-pass walk, with patterns and runs placed
// across the middle, at its edges and at the input's ends.
func TestAutomatonSplit(t *testing.T) {
	rs, err := defaultRules()
	if err != nil {
		t.Fatal(err)
	}
	a := rs.ac
	type hit struct{ p, end int }
	oneWalk := func(data []byte) ([]hit, []span) {
		var hs []hit
		var runs []span
		_, run := a.walk(data, 0, 0, 0, &runs, func(p, end int) { hs = append(hs, hit{p, end}) })
		if run >= minRun {
			runs = append(runs, span{len(data) - run, len(data)})
		}
		return hs, runs
	}
	cmpHit := func(x, y hit) int {
		if x.end != y.end {
			return x.end - y.end
		}
		return x.p - y.p
	}
	src, err := os.ReadFile(filepath.Join(build.Default.GOROOT, "src", "net", "http", "server.go"))
	if err != nil {
		t.Fatal(err)
	}
	token := []byte("AKIAQWERTYUIOPASDFGHghp_abcdefABCDEF0123456789zz")
	n := 0
	for _, size := range []int{splitScan, splitScan + 1, 8191, 10000} {
		for _, off := range []int{-40, -17, -16, -15, -3, -1, 0, 1, 2, 15, 16, 30} {
			for _, fill := range []string{"src", "token", "space"} {
				data := make([]byte, size)
				switch fill {
				case "src":
					copy(data, src[1000:])
				case "token":
					for i := range data {
						data[i] = token[i%len(token)]
					}
				default:
					for i := range data {
						data[i] = ' '
					}
				}
				mid := size / 2
				copy(data[max(0, mid+off):], token[:min(len(token), size-max(0, mid+off))])
				copy(data[max(0, size-10):], "akia-s.xyz")
				var got []hit
				runs := a.scan(data, func(p, end int) { got = append(got, hit{p, end}) })
				wantHits, wantRuns := oneWalk(data)
				slices.SortFunc(got, cmpHit)
				slices.SortFunc(wantHits, cmpHit)
				if !slices.Equal(got, wantHits) || !slices.Equal(runs, wantRuns) {
					t.Errorf("size %d, token at middle%+d, fill %s: hits %d/%d equal %v, runs %v, want %v", size, off, fill, len(got), len(wantHits), slices.Equal(got, wantHits), runs, wantRuns)
				}
				n++
			}
		}
	}
	t.Logf("%d inputs walked both ways", n)
}
