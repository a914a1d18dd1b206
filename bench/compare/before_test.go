package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// withBefore is sampleMeasure with the airlock row measured against a
// before build too.
func withBefore(before *subject) measure {
	m := sampleMeasure()
	m.subject("airlock").Before = before
	return m
}

func TestBeforeColumnAndRatio(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    *subject
		want string // the airlock row's median, before and vs before cells
	}{
		{name: "measured", b: &subject{Name: "before", Rounds: [][]metric{{{"req/s", 200}}, {{"req/s", 250}}, {{"req/s", 150}}}},
			want: "| HTTP | airlock | **400.0** req/s |  | 200.0 | 2.00x | 0.40x | 1.60x (squid) |"},
		{name: "lacks the feature", b: &subject{Name: "before", Note: "n/a: unknown flag: --rootless"},
			want: "| HTTP | airlock | **400.0** req/s |  | n/a | | 0.40x | 1.60x (squid) |"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table := renderTable([]measure{withBefore(tc.b)})
			if !strings.Contains(table, tc.want) {
				t.Errorf("got table\n%s\nwant a row starting %q", table, tc.want)
			}
			if !strings.HasPrefix(table, "| measure | subject | median | other medians | before | vs before |") {
				t.Errorf("got header %q, want before columns", strings.SplitN(table, "\n", 2)[0])
			}
			// Rows without a before build have empty before cells.
			if !strings.Contains(table, "| HTTP | direct | **1000** req/s |  | | | ") {
				t.Errorf("direct row: got table\n%s", table)
			}
		})
	}
	if table := renderTable([]measure{sampleMeasure()}); strings.Contains(table, "before") {
		t.Errorf("a run without a before build: got table with a before column\n%s", table)
	}
}

func TestGoals(t *testing.T) {
	start := measure{Name: startName, Primary: "median ms", Subjects: []subject{
		{Name: "bubblewrap", Peer: true, Rounds: [][]metric{{{"median ms", 5}}}},
	}}
	m := measure{Name: "HTTP", Primary: "req/s", Higher: true, Subjects: []subject{
		{Name: "airlock", Rounds: [][]metric{{{"req/s", 300}, {"p99 ms", 4}, {"median ms", 12}, {"errors", 0}}}},
		{Name: "squid", Peer: true, Rounds: [][]metric{{{"req/s", 250}, {"p99 ms", 5}}}},
	}}
	ms := []measure{start, m}
	for _, tc := range []struct {
		name     string
		g        goal
		want     goalStatus
		wantText string
		wantGot  string
	}{
		{name: "ratio missed", g: atLeast("req/s", 1.5, "squid"), want: goalMissed, wantText: "req/s ≥ 1.5x squid", wantGot: "1.20x"},
		{name: "ratio met", g: atLeast("req/s", 1, "squid"), want: goalMet, wantText: "req/s ≥ squid", wantGot: "1.20x"},
		{name: "lower is better", g: atMost("p99 ms", 1, "squid"), want: goalMet, wantText: "p99 ms ≤ squid", wantGot: "0.80x"},
		{name: "constant", g: under("p99 ms", 4), want: goalMissed, wantText: "p99 ms < 4", wantGot: "4.00"},
		{name: "equal", g: equal("errors", 0), want: goalMet, wantText: "errors = 0", wantGot: "0.00"},
		{name: "another measure", g: goal{Metric: "median ms", Op: "<=", Factor: 2, Ref: "bubblewrap", RefMeasure: startName},
			want: goalMissed, wantText: "median ms ≤ 2x bubblewrap", wantGot: "2.40x"},
		{name: "reference not measured", g: atLeast("req/s", 1, "dnsmasq"), want: goalUnknown, wantGot: "dnsmasq not measured"},
		{name: "metric not measured", g: under("p50 ms", 10), want: goalUnknown, wantGot: "not measured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, got := tc.g.eval(ms, &ms[1], &ms[1].Subjects[0])
			if st != tc.want || got != tc.wantGot {
				t.Errorf("got %v %q, want %v %q", st, got, tc.want, tc.wantGot)
			}
			if tc.wantText != "" && tc.g.text() != tc.wantText {
				t.Errorf("text: got %q, want %q", tc.g.text(), tc.wantText)
			}
		})
	}
	for _, tc := range []struct {
		name       string
		goals      []goal
		wantStatus string
		wantTarget string
	}{
		{name: "all met", goals: []goal{atLeast("req/s", 1, "squid"), atMost("p99 ms", 1, "squid")}, wantStatus: "**met**",
			wantTarget: "req/s ≥ squid: 1.20x; p99 ms ≤ squid: 0.80x"},
		{name: "one missed", goals: []goal{atLeast("req/s", 1.5, "squid"), atMost("p99 ms", 1, "squid")}, wantStatus: "**missed**",
			wantTarget: "req/s ≥ 1.5x squid: 1.20x; p99 ms ≤ squid: 0.80x"},
		{name: "missed beats unknown", goals: []goal{under("p50 ms", 1), under("p99 ms", 1)}, wantStatus: "**missed**",
			wantTarget: "p50 ms < 1: not measured; p99 ms < 1: 4.00"},
		{name: "unknown", goals: []goal{under("p50 ms", 1)}, wantStatus: "n/a", wantTarget: "p50 ms < 1: not measured"},
		{name: "none", wantStatus: "", wantTarget: ""},
	} {
		t.Run("cells "+tc.name, func(t *testing.T) {
			s := ms[1].Subjects[0]
			s.Goals = tc.goals
			target, status := targetCells(ms, &ms[1], &s)
			if target != tc.wantTarget || status != tc.wantStatus {
				t.Errorf("got %q %q, want %q %q", target, status, tc.wantTarget, tc.wantStatus)
			}
		})
	}
}

func TestLacking(t *testing.T) {
	for _, tc := range []struct {
		name  string
		out   string
		lacks bool
	}{
		{name: "unknown flag", out: "Error: unknown flag: --rootless\nUsage: ...", lacks: true},
		{name: "unknown config key", out: "airlock: config: yaml: unmarshal errors:\n  line 9: field enable not found in type config.Inspect", lacks: true},
		{name: "unknown command", out: `Error: unknown command "serve" for "airlock"`, lacks: true},
		{name: "a real failure", out: "airlock: sandbox: clone: operation not permitted", lacks: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := lacking(func() ([]metric, string, error) { return nil, tc.out, fmt.Errorf("exit status 1") })
			_, _, err := run()
			if got := errors.Is(err, errLacks); got != tc.lacks {
				t.Errorf("got %v (lacks %v), want lacks %v", err, got, tc.lacks)
			}
		})
	}
	ok := lacking(func() ([]metric, string, error) {
		return []metric{{"x", 1}}, "unknown flag in the output of a success", nil
	})
	if got, _, err := ok(); err != nil || len(got) != 1 {
		t.Errorf("a success: got %v, %v, want it unchanged", got, err)
	}
	if lacking(nil) != nil {
		t.Errorf("lacking(nil): got a run, want nil")
	}
}

func TestMergeRounds(t *testing.T) {
	one := func(v float64) []measure {
		return []measure{{Name: "m", Primary: "x", Subjects: []subject{{Name: "airlock serve", Rounds: [][]metric{{{"x", v}}}}}}}
	}
	got := mergeRounds(mergeRounds(mergeRounds(nil, one(1)), one(3)), one(2))
	if v, _ := got[0].Subjects[0].median("x"); v != 2 || len(got[0].Subjects[0].Rounds) != 3 {
		t.Errorf("got %d rounds, median %v, want 3 rounds, median 2", len(got[0].Subjects[0].Rounds), v)
	}
}

// parseTable reads the generated section's Markdown table back: the header
// cells and each row's cells.
func parseTable(t *testing.T, doc string) (header []string, rows [][]string) {
	t.Helper()
	bi, ei := strings.Index(doc, beginMark), strings.Index(doc, endMark)
	if bi < 0 || ei < bi {
		t.Fatalf("no generated section in\n%s", doc)
	}
	cells := func(line string) []string {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") || !strings.HasSuffix(line, "|") {
			t.Fatalf("table line %q: want | at both ends", line)
		}
		// Split on the pipes a Markdown table splits on: not "\|".
		var parts []string
		var cur strings.Builder
		inner := line[1 : len(line)-1]
		for i := 0; i < len(inner); i++ {
			switch {
			case inner[i] == '\\' && i+1 < len(inner) && inner[i+1] == '|':
				cur.WriteByte('|')
				i++
			case inner[i] == '|':
				parts = append(parts, strings.TrimSpace(cur.String()))
				cur.Reset()
			default:
				cur.WriteByte(inner[i])
			}
		}
		return append(parts, strings.TrimSpace(cur.String()))
	}
	var inTable bool
	for _, line := range strings.Split(doc[bi:ei], "\n") {
		switch {
		case !inTable && strings.HasPrefix(line, "| measure |"):
			header, inTable = cells(line), true
		case inTable && strings.HasPrefix(line, "|---"):
			if n := len(cells(line)); n != len(header) {
				t.Fatalf("separator has %d cells, header %d", n, len(header))
			}
		case inTable && strings.HasPrefix(line, "|"):
			rows = append(rows, cells(line))
		case inTable:
			return header, rows
		}
	}
	return header, rows
}

// TestWrittenTableParses: the Markdown written into the doc reads back as
// the table: one row per subject, every row as wide as the header, the
// medians, before cells, ratios and statuses where they belong.
func TestWrittenTableParses(t *testing.T) {
	dir := t.TempDir()
	doc, raw := filepath.Join(dir, "B.md"), filepath.Join(dir, "raw.json")
	http := withBefore(&subject{Name: "before", Rounds: [][]metric{{{"req/s", 200}}}})
	http.subject("airlock").Goals = []goal{atLeast("req/s", 1.5, "squid")}
	start := measure{Name: startName, Primary: "median ms", Subjects: []subject{
		{Name: "airlock rootless (alk-ci)", Rounds: [][]metric{{{"median ms", 12}}}, Goals: []goal{atMost("median ms", 3, "bubblewrap (alk-ci)")},
			Before: &subject{Name: "before", Note: "n/a: the before build's `airlock run` has no --rootless"}},
		{Name: "bubblewrap (alk-ci)", Peer: true, Rounds: [][]metric{{{"median ms", 5}}}},
		{Name: "airlock | pipe", Note: "not measured: a name with a pipe"},
	}}
	if err := writeReport(doc, raw, machine{Rounds: 3, Before: "082ed75 (082ed75)", Versions: map[string]string{"airlock before": "082ed75: airlock 082ed75"}},
		[]measure{http, start}); err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	header, rows := parseTable(t, string(text))
	wantHeader := []string{"measure", "subject", "median", "other medians", "before", "vs before", "vs direct", "vs best peer", "target", "status"}
	if strings.Join(header, ",") != strings.Join(wantHeader, ",") {
		t.Fatalf("header: got %q, want %q", header, wantHeader)
	}
	if len(rows) != 7 {
		t.Fatalf("got %d rows, want 7 (one per subject)", len(rows))
	}
	col := map[string]int{}
	for i, h := range header {
		col[h] = i
	}
	byName := map[string][]string{}
	for _, r := range rows {
		if len(r) != len(header) {
			t.Errorf("row %q: got %d cells, want %d", r, len(r), len(header))
			continue
		}
		byName[r[col["measure"]]+"/"+r[col["subject"]]] = r
	}
	for _, tc := range []struct {
		row, column, want string
	}{
		{"HTTP/airlock", "median", "**400.0** req/s"},
		{"HTTP/airlock", "before", "200.0"},
		{"HTTP/airlock", "vs before", "2.00x"},
		{"HTTP/airlock", "vs direct", "0.40x"},
		{"HTTP/airlock", "vs best peer", "1.60x (squid)"},
		{"HTTP/airlock", "target", "req/s ≥ 1.5x squid: 1.60x"},
		{"HTTP/airlock", "status", "**met**"},
		{"HTTP/squid", "before", ""},
		{startName + "/airlock rootless (alk-ci)", "before", "n/a"},
		{startName + "/airlock rootless (alk-ci)", "target", "median ms ≤ 3x bubblewrap (alk-ci): 2.40x"},
		{startName + "/airlock rootless (alk-ci)", "status", "**met**"},
		{startName + "/airlock | pipe", "other medians", "not measured: a name with a pipe"},
	} {
		r, ok := byName[tc.row]
		if !ok {
			t.Errorf("no row %s in %v", tc.row, rows)
			continue
		}
		if got := r[col[tc.column]]; got != tc.want {
			t.Errorf("%s, %s: got %q, want %q", tc.row, tc.column, got, tc.want)
		}
	}
	s := string(text)
	for _, want := range []string{"\"before\" is airlock built from `082ed75 (082ed75)`", "airlock before `082ed75: airlock 082ed75`",
		"- airlock rootless (alk-ci), before\n  - n/a: the before build's `airlock run` has no --rootless", "- airlock, before\n  - round 1: req/s 200.0"} {
		if !strings.Contains(s, want) {
			t.Errorf("the section does not say %q:\n%s", want, s)
		}
	}
}

// TestTableWidths: with and without a before build, every row of the table
// has the header's cells, measured or not.
func TestTableWidths(t *testing.T) {
	notMeasured := subject{Name: "airlock rootless", Note: "not measured: no -rootless-user"}
	for _, tc := range []struct {
		name string
		m    measure
		cols int
	}{
		{name: "no before build", m: sampleMeasure(), cols: 8},
		{name: "before build", m: withBefore(&subject{Name: "before", Rounds: [][]metric{{{"req/s", 1}}}}), cols: 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.m.Subjects = append(tc.m.Subjects, notMeasured)
			header, rows := parseTable(t, beginMark+"\n"+renderTable([]measure{tc.m})+"\n"+endMark)
			if len(header) != tc.cols || len(rows) != len(tc.m.Subjects) {
				t.Fatalf("got %d columns, %d rows, want %d, %d", len(header), len(rows), tc.cols, len(tc.m.Subjects))
			}
			for _, r := range rows {
				if len(r) != len(header) {
					t.Errorf("row %q: got %d cells, want %d", r, len(r), len(header))
				}
			}
		})
	}
}

func TestBesideStart(t *testing.T) {
	names := func(ms []measure) string {
		var n []string
		for _, m := range ms {
			n = append(n, m.Name)
		}
		return strings.Join(n, ";")
	}
	for _, tc := range []struct {
		name, in, want string
	}{
		{name: "moved", in: "http;" + startName + ";tunnels;" + daemonStartName + ";rss", want: "http;" + startName + ";" + daemonStartName + ";tunnels;rss"},
		{name: "no start row", in: "http;tunnels;" + daemonStartName, want: "http;tunnels;" + daemonStartName},
		{name: "already beside", in: startName + ";" + daemonStartName, want: startName + ";" + daemonStartName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ms []measure
			for _, n := range strings.Split(tc.in, ";") {
				ms = append(ms, measure{Name: n})
			}
			if got := names(besideStart(ms)); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// TestMeasureRoundsAlternates: after and before run beside each other in
// every round, the before build first in every other round; a before build
// that lacks the feature is n/a from its first try, and the table says so.
func TestMeasureRoundsAlternates(t *testing.T) {
	var order []string
	fake := func(name string, v float64, err error) func() ([]metric, string, error) {
		return func() ([]metric, string, error) {
			order = append(order, name)
			if err != nil {
				return nil, "", err
			}
			return []metric{{"req/s", v}}, "", nil
		}
	}
	ms := []measure{{Name: "HTTP", Primary: "req/s", Higher: true, Subjects: []subject{
		{Name: "airlock", run: fake("after", 300, nil), Before: &subject{Name: "before", run: fake("before", 200, nil)}},
		{Name: "airlock rootless", run: fake("rootless", 100, nil),
			Before: &subject{Name: "before", run: lacking(fake("rootless before", 0, errors.New("exit status 2: Error: unknown flag: --rootless")))}},
	}}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := measureRounds(context.Background(), log, ms, 3); err != nil {
		t.Fatal(err)
	}
	want := "after,before,rootless,rootless before," + // round 1
		"rootless,before,after," + // round 2: starts with the next subject, before first
		"after,before,rootless" // round 3
	if got := strings.Join(order, ","); got != want {
		t.Errorf("order: got %s, want %s", got, want)
	}
	rl := ms[0].subject("airlock rootless")
	if len(rl.Before.Rounds) != 0 || !strings.HasPrefix(rl.Before.Note, "n/a: ") || !strings.Contains(rl.Before.Note, "--rootless") {
		t.Errorf("before build without the feature: got %d rounds, note %q, want none and n/a naming --rootless", len(rl.Before.Rounds), rl.Before.Note)
	}
	if a := ms[0].subject("airlock"); len(a.Rounds) != 3 || len(a.Before.Rounds) != 3 {
		t.Errorf("got %d after and %d before rounds, want 3 each", len(a.Rounds), len(a.Before.Rounds))
	}
	table := renderTable(ms)
	for _, row := range []string{"| HTTP | airlock | **300.0** req/s |  | 200.0 | 1.50x |", "| HTTP | airlock rootless | **100.0** req/s |  | n/a | |"} {
		if !strings.Contains(table, row) {
			t.Errorf("got table\n%s\nwant a row starting %q", table, row)
		}
	}
	// Any other failure of the before build fails the run.
	ms[0].Subjects[0].Before.run = lacking(fake("broken", 0, errors.New("exit status 1: sandbox: permission denied")))
	if err := measureRounds(context.Background(), log, ms, 1); err == nil || !strings.Contains(err.Error(), "airlock (before)") {
		t.Errorf("a broken before build: got %v, want an error naming airlock (before)", err)
	}
}

// TestTwinBeforeLacksFlag: a before build whose `airlock run --help` lacks a
// flag the row needs gets n/a without being run; one that has it is run.
func TestTwinBeforeLacksFlag(t *testing.T) {
	dir := t.TempDir()
	before := filepath.Join(dir, "airlock")
	if err := os.WriteFile(before, []byte("#!/bin/sh\necho 'Flags:\n      --no-daemon   run in-process'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	e := &env{ctx: context.Background(), bin: "/after/airlock", before: before}
	mk := func(bin string) subject {
		return subject{Name: "airlock", Command: bin + " run", Goals: []goal{under("x", 1)},
			run: func() ([]metric, string, error) { return []metric{{"x", 1}}, "", nil }}
	}
	for _, tc := range []struct {
		flag   string
		wantNA bool
	}{{"--rootless", true}, {"--no-daemon", false}} {
		s := e.twin(mk, tc.flag)
		if s.Command != "/after/airlock run" || s.Before == nil || s.Before.Command != before+" run" {
			t.Fatalf("%s: got %q and before %+v, want each build's command", tc.flag, s.Command, s.Before)
		}
		if na := s.Before.run == nil && strings.Contains(s.Before.Note, "n/a") && strings.Contains(s.Before.Note, tc.flag); na != tc.wantNA {
			t.Errorf("%s: got n/a %v (note %q), want %v", tc.flag, na, s.Before.Note, tc.wantNA)
		}
		if s.Before.Goals != nil || s.Before.Name != "before" {
			t.Errorf("%s: the before twin carries goals %v, name %q; want none, before", tc.flag, s.Before.Goals, s.Before.Name)
		}
	}
	if s := (&env{bin: "/after/airlock"}).twin(mk); s.Before != nil {
		t.Errorf("no before build: got a twin %+v", s.Before)
	}
}

// TestRenderRoundTrip: -render from the raw numbers writes the same section
// (before rounds, n/a notes and goals survive the JSON).
func TestRenderRoundTrip(t *testing.T) {
	dir := t.TempDir()
	raw := filepath.Join(dir, "raw.json")
	m := withBefore(&subject{Name: "before", Rounds: [][]metric{{{"req/s", 200}}}})
	m.subject("airlock").Goals = []goal{atLeast("req/s", 1.5, "squid"), {Metric: "req/s", Op: "<=", Factor: 2, Ref: "bubblewrap", RefMeasure: startName}}
	m.Subjects = append(m.Subjects, subject{Name: "airlock rootless", Rounds: [][]metric{{{"req/s", 1}}}, Before: &subject{Name: "before", Note: "n/a: no --rootless"}})
	mach := machine{Rounds: 3, Before: "082ed75", Versions: map[string]string{"airlock": "x"}}
	first, again := filepath.Join(dir, "first.md"), filepath.Join(dir, "again.md")
	if err := writeReport(first, raw, mach, []measure{m}); err != nil {
		t.Fatal(err)
	}
	if err := rerender(again, raw); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(first)
	b, _ := os.ReadFile(again)
	if string(a) != string(b) {
		t.Errorf("-render wrote\n%s\nthe run wrote\n%s", b, a)
	}
	if !strings.Contains(string(b), "n/a: no --rootless") || !strings.Contains(string(b), "req/s ≤ 2x bubblewrap: bubblewrap not measured") {
		t.Errorf("the re-rendered section lost the note or a goal:\n%s", b)
	}
}

func TestDenials(t *testing.T) {
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	lines := []string{
		`{"seq":1,"ts":"2026-11-29T09:00:00Z","kind":"http","decision":"deny","port":7,"status":403,"reasons":[{"id":"tunnel_limit","msg":"x"}]}`,
		`{"seq":2,"ts":"2026-11-29T10:00:00Z","kind":"http","decision":"deny","port":7,"status":403,"reasons":[{"id":"tunnel_limit","msg":"x"}]}`,
		`{"seq":3,"ts":"2026-11-29T10:00:01Z","kind":"http","decision":"deny","port":7,"status":403,"reasons":[{"id":"tunnel_limit","msg":"x"}]}`,
		`{"seq":4,"ts":"2026-11-29T10:00:02Z","kind":"http","decision":"error","port":7,"status":502}`,
		`{"seq":5,"ts":"2026-11-29T10:00:03Z","kind":"http","decision":"deny","port":443,"status":403,"reasons":[{"id":"policy","msg":"x"}]}`,
		`{"seq":6,"ts":"2026-11-29T10:00:04Z","kind":"http","decision":"allow","port":7}`,
	}
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	since := time.Date(2026, 11, 29, 9, 30, 0, 0, time.UTC)
	if got, want := denials(file, 7, since), "deny tunnel_limit (403) ×2, error (502) ×1"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := denials(file, 8, since); got != "none" {
		t.Errorf("another port: got %q, want none", got)
	}
	if got := denials(filepath.Join(t.TempDir(), "missing"), 7, since); !strings.HasPrefix(got, "unread: ") {
		t.Errorf("a missing log: got %q, want unread", got)
	}
}
