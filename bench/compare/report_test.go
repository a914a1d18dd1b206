package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func sampleMeasure() measure {
	return measure{Name: "HTTP", Primary: "req/s", Higher: true, Subjects: []subject{
		{Name: "direct", Rounds: [][]metric{{{"req/s", 1000}}, {{"req/s", 900}}, {{"req/s", 1100}}}},
		{Name: "airlock", Rounds: [][]metric{{{"req/s", 300}}, {{"req/s", 500}}, {{"req/s", 400}}}},
		{Name: "squid", Peer: true, Rounds: [][]metric{{{"req/s", 250}}}},
		{Name: "other", Peer: true, Rounds: [][]metric{{{"req/s", 200}}}},
	}}
}

func TestMedianAndRatios(t *testing.T) {
	m := sampleMeasure()
	for _, tc := range []struct {
		name    string
		subject string
		want    float64
	}{
		{name: "odd rounds", subject: "airlock", want: 400},
		{name: "one round", subject: "squid", want: 250},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := m.subject(tc.subject).median("req/s")
			if !ok || got != tc.want {
				t.Errorf("got %v (%v), want %v", got, ok, tc.want)
			}
		})
	}
	if got := m.bestPeer().Name; got != "squid" {
		t.Errorf("best peer: got %v, want squid", got)
	}
	m.Higher = false
	if got := m.bestPeer().Name; got != "other" {
		t.Errorf("best peer, lower is better: got %v, want other", got)
	}
	m.Higher = true
	table := renderTable([]measure{m})
	// airlock 400 / direct 1000, / squid 250.
	if !strings.Contains(table, "| HTTP | airlock | **400.0** req/s |  | 0.40x | 1.60x (squid) |") {
		t.Errorf("airlock row: got table\n%s", table)
	}
}

func TestWriteReportReplacesOnlyItsSection(t *testing.T) {
	dir := t.TempDir()
	doc, raw := filepath.Join(dir, "B.md"), filepath.Join(dir, "raw.json")
	before, after := "# title\n\nother sections\n\n", "\n## later section\n"
	if err := os.WriteFile(doc, []byte(before+beginMark+"\nold numbers\n"+endMark+"\n"+after), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeReport(doc, raw, machine{Rounds: 3}, []measure{sampleMeasure()}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(doc)
	s := string(got)
	if !strings.HasPrefix(s, before+beginMark) || !strings.HasSuffix(s, endMark+"\n"+after) {
		t.Errorf("the text around the section changed:\n%s", s)
	}
	if strings.Contains(s, "old numbers") || strings.Count(s, beginMark) != 1 {
		t.Errorf("the old section was not replaced exactly once:\n%s", s)
	}
	if _, err := os.Stat(raw); err != nil {
		t.Errorf("raw numbers: %v", err)
	}
	// A second run replaces its own output, not appends.
	if err := writeReport(doc, raw, machine{Rounds: 3}, []measure{sampleMeasure()}); err != nil {
		t.Fatal(err)
	}
	again, _ := os.ReadFile(doc)
	if string(again) != s {
		t.Errorf("a second identical run changed the file")
	}
}

func TestWriteReportRefusesOneMarker(t *testing.T) {
	doc := filepath.Join(t.TempDir(), "B.md")
	orig := "# title\n" + beginMark + "\nhand edits\n"
	if err := os.WriteFile(doc, []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	err := writeReport(doc, filepath.Join(t.TempDir(), "raw.json"), machine{}, nil)
	if err == nil || !strings.Contains(err.Error(), "marker") {
		t.Errorf("got %v, want an error naming the marker", err)
	}
	if got, _ := os.ReadFile(doc); string(got) != orig {
		t.Errorf("the file changed after the error:\n%s", got)
	}
}

func TestParsers(t *testing.T) {
	wrk := `Running 5s test @ http://127.0.0.1:3128/
  Latency Distribution
     50%    2.50ms
     75%    3.00ms
     90%    5.00ms
     99%  350.00us
  20000 requests in 5.00s, 1.5MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 3
Requests/sec:   4000.50
`
	got, err := parseWrk(wrk)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"req/s": 4000.5, "p50 ms": 2.5, "p99 ms": 0.35, "errors": 6}
	for _, m := range got {
		if w, ok := want[m.Name]; !ok || math.Abs(w-m.Value) > 1e-9 {
			t.Errorf("wrk %s: got %v, want %v", m.Name, m.Value, w)
		}
		delete(want, m.Name)
	}
	if len(want) > 0 {
		t.Errorf("wrk: missing %v", want)
	}
	if _, err := parseLoad(100)("time=... level=ERROR msg=x\n{\"requests\":1,\"errors\":0,\"bytes\":99,\"seconds\":1}\n"); err == nil {
		t.Errorf("loadclient short read: got no error, want one")
	}
	l, err := parseLoad(100)("{\"requests\":1,\"errors\":0,\"bytes\":100,\"seconds\":2}\ntime=... level=ERROR msg=\"sandbox lost\"\n")
	if err != nil || l[0].Value != 100.0/2/1e6 {
		t.Errorf("loadclient: got %v, %v, want 5e-05 MB/s", l, err)
	}
}
