package policy

import (
	"context"
	"testing"
)

func TestSmoke(t *testing.T) {
	probs, err := Check("")
	t.Logf("check: %v %v", probs, err)
	rep, err := RunTests(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		if !r.Pass {
			t.Logf("FAIL %s %s %s: %s", r.Unit, r.Location, r.Name, r.Error)
		}
	}
	t.Logf("passed %d failed %d coverage %.1f", rep.Passed, rep.Failed, rep.Coverage)
	e, err := New(Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := e.Decide(context.Background(), &Input{Kind: KindHTTP, Sandbox: Sandbox{ID: "x"}, Destination: Destination{Host: "pypi.org", Port: 443}, HTTP: &HTTP{Method: "GET", Scheme: "https", Path: "/"}})
	t.Logf("%+v", d)
}
