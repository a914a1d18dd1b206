package inspect

import (
	"math/rand/v2"
	"testing"
)

// TestTokenEnds: the remembering tokenEnd answers as tokenEnd does, for
// queries in any order over long tokens, short ones and the cap.
func TestTokenEnds(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 1))
	for iter := range 2000 {
		n := rnd.IntN(3000)
		d := make([]byte, n)
		gap := 1 + rnd.IntN(400)
		for i := range d {
			d[i] = 'a'
			if rnd.IntN(gap) == 0 {
				d[i] = ' '
			}
		}
		var te tokenEnds
		for range 50 {
			h := rnd.IntN(n + 1)
			if got, want := te.end(d, h), tokenEnd(d, h); got != want {
				t.Fatalf("iteration %d (%d bytes): end(%d): got %d, want %d", iter, n, h, got, want)
			}
		}
	}
}
