package inspect

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// laneResult is everything a walk gives: hits in order, then token runs.
type laneResult struct {
	hits [][2]int
	runs []span
}

func walkBoth(a *automaton, data []byte) (lanes, plain laneResult) {
	lanes.runs = a.scan(data, func(p, end int) { lanes.hits = append(lanes.hits, [2]int{p, end}) })
	plain.runs = a.walk(data, func(p, end int) { plain.hits = append(plain.hits, [2]int{p, end}) })
	return lanes, plain
}

func sameWalk(t *testing.T, name string, a *automaton, data []byte) {
	t.Helper()
	got, want := walkBoth(a, data)
	if !slices.Equal(got.hits, want.hits) {
		t.Errorf("%s (%d bytes): hits differ: lanes %d, walk %d", name, len(data), len(got.hits), len(want.hits))
	}
	if !slices.Equal(got.runs, want.runs) {
		t.Errorf("%s (%d bytes): token runs: got %v, want %v", name, len(data), got.runs, want.runs)
	}
}

// TestScanLanesMatchesWalk: the interleaved walk gives exactly the plain
// walk's hits and token runs, on every body kind and on inputs built to
// put keywords and runs across the lanes' edges.
func TestScanLanesMatchesWalk(t *testing.T) {
	rs, err := defaultRules()
	if err != nil {
		t.Fatal(err)
	}
	a := rs.ac
	bodies := BodyKinds(t)
	for _, name := range BodyKindNames(bodies) {
		body := bodies[name]
		sameWalk(t, name, a, body)
		for _, n := range []int{laneMin, laneMin + 1, laneMin + 3, 4099} {
			sameWalk(t, name, a, body[:min(n, len(body))])
		}
	}
	// Keywords, token runs and separators placed at random, at sizes
	// around the lane edges.
	rnd := rand.New(rand.NewPCG(7, 11))
	pieces := []string{" ", "\n", "=", ".", "\"", "xoxb", "AKIA", "ghp_", "ey", "sk", "s.", "-----BEGIN",
		"bundle_enterprise__contribsys__com", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "Zm9vYmFy", "0123456789abcdef", "aikA", "_phg"}
	for iter := range 400 {
		n := laneMin + rnd.IntN(6000)
		if iter%4 == 0 {
			n = laneMin + rnd.IntN(8)
		}
		var b []byte
		for len(b) < n {
			b = append(b, pieces[rnd.IntN(len(pieces))]...)
		}
		sameWalk(t, "random pieces", a, b[:n])
	}
	// A run exactly spanning edges: all token bytes, and all token but one
	// byte next to each edge.
	for n := laneMin; n < laneMin+8; n++ {
		b := make([]byte, n)
		for i := range b {
			b[i] = 'a'
		}
		sameWalk(t, "all token", a, b)
		m := n / lanes
		for _, cut := range []int{m - 1, m, m + 1, 2*m - minRun, 2*m + minRun - 1, 3*m - 1, 3 * m, n - 1} {
			c := slices.Clone(b)
			c[cut] = ' '
			sameWalk(t, "one cut", a, c)
		}
	}
}

// FuzzScanLanes: lanes and walk agree on any input (inputs shorter than
// laneMin are repeated up to it).
func FuzzScanLanes(f *testing.F) {
	f.Add([]byte("xoxb-1234567890-abcdefghij ghp_0123456789abcdefghijklmnopqrstuvwxyz"))
	f.Add([]byte("AKIA"))
	rs, err := defaultRules()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		for len(data) < laneMin {
			data = append(data, data...)
		}
		sameWalk(t, "fuzz", rs.ac, data)
	})
}

// BenchmarkWalk compares the plain walk and the lanes on each body kind:
// the automaton alone, no rule behind it.
func BenchmarkWalk(b *testing.B) {
	rs, err := defaultRules()
	if err != nil {
		b.Fatal(err)
	}
	bodies := BodyKinds(b)
	for _, name := range BodyKindNames(bodies) {
		body := bodies[name]
		for _, w := range []struct {
			name string
			f    func([]byte, func(int, int)) []span
		}{{"walk", rs.ac.walk}, {"lanes", rs.ac.scan}} {
			b.Run(name+"/"+w.name, func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				start := cpuTime()
				for b.Loop() {
					w.f(body, func(int, int) {})
				}
				if d := cpuTime() - start; d > 0 {
					b.ReportMetric(float64(len(body))*float64(b.N)/d.Seconds()/1e6, "MB/cpu-s")
				}
			})
		}
	}
}

// TestTokenRuns: the skipping search finds exactly the runs the walk
// does, at every length and alignment, with runs around minRun bytes and
// the bytes its word test lets through (',', ':', '@') between them.
func TestTokenRuns(t *testing.T) {
	rs, err := defaultRules()
	if err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(5, 9))
	const alpha = "abcXYZ019+/=_-"
	seps := ",:.@ \n;[`~"
	for iter := range 3000 {
		var b []byte
		n := rnd.IntN(300)
		for len(b) < n {
			if rnd.IntN(3) == 0 {
				b = append(b, seps[rnd.IntN(len(seps))])
				continue
			}
			k := minRun - 3 + rnd.IntN(7)
			if rnd.IntN(4) == 0 {
				k = rnd.IntN(40)
			}
			for range k {
				b = append(b, alpha[rnd.IntN(len(alpha))])
			}
		}
		want := rs.ac.walk(b, func(int, int) {})
		if got := tokenRuns(b); !slices.Equal(got, want) {
			t.Fatalf("iteration %d, %q: got %v, want %v", iter, b, got, want)
		}
	}
}
