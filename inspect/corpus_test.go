package inspect_test

import (
	"testing"

	"github.com/airlock-dev/airlock/inspect"
	"github.com/airlock-dev/airlock/inspect/inspecttest"
)

var testKey = []byte("airlock-inspect-test-key-0123456789")

// TestCorpus runs the whole corpus at the library level and prints the
// block rate on attacks and the false-positive rate on benign traffic.
// Goal: at least 95% blocked, no benign case blocked.
func TestCorpus(t *testing.T) {
	s, err := inspect.New(inspect.Config{Key: testKey})
	if err != nil {
		t.Fatal(err)
	}
	cases := inspecttest.Cases(inspect.NewCanaries(testKey).For("sandbox-corpus"))
	if len(cases) < 150 {
		t.Errorf("corpus has %d cases, want at least 150", len(cases))
	}
	var rs []inspecttest.Result
	for _, c := range cases {
		r := inspecttest.Result{Case: c, Findings: inspecttest.Evaluate(s, c)}
		rs = append(rs, r)
		if !c.Attack() && inspecttest.Flags(r.Findings) {
			t.Logf("benign %s flagged: %+v", c.Name, r.Findings)
		}
		if !r.OK() {
			t.Errorf("%s (%s, expect %s %s): got %+v", c.Name, c.Transport, c.Expect, c.Class, r.Findings)
		}
	}
	rates := inspecttest.Tally(rs)
	t.Logf("corpus of %d cases: %v", len(cases), rates)
	if rates.Blocked*100 < rates.BlockAttacks*95 {
		t.Errorf("blocked %d of %d attacks, want at least 95%%", rates.Blocked, rates.BlockAttacks)
	}
	if rates.BenignBlocked > 0 {
		t.Errorf("blocked %d benign cases, want 0", rates.BenignBlocked)
	}
}
