package daemon

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/learn"
	"github.com/airlock-dev/airlock/sandboxd"
)

func tarOf(t testing.TB, files map[string]string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for name, data := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestFiles(t *testing.T) {
	w := newFakeWorld(t, func(c *config.Config) { c.Sandbox.MaxUpload = 8192 })
	c := w.client(alice)
	sb := c.create(t, `{}`)
	base := "/v1/sandboxes/" + sb.ID + "/files"
	r := c.do(t, "PUT", base+"?path=/workspace/src", bytes.NewReader(tarOf(t, map[string]string{"a.txt": "hello"})))
	var fr api.FilesResult
	r.decode(t, &fr)
	if r.status != 200 || fr.Files != 1 || fr.Bytes != 5 {
		t.Fatalf("put: %d %+v", r.status, fr)
	}
	r = c.do(t, "GET", base+"?path=/workspace/src/a.txt", nil)
	if r.status != 200 || r.header.Get("Content-Type") != "application/x-tar" {
		t.Fatalf("get: %d %s", r.status, r.body)
	}
	tr := tar.NewReader(bytes.NewReader(r.body))
	if h, err := tr.Next(); err != nil || h.Name != "a.txt" {
		t.Fatalf("get: entry %v %v", h, err)
	}
	if data, _ := io.ReadAll(tr); string(data) != "hello" {
		t.Fatalf("get: %q", data)
	}
	tests := []struct{ name, method, query, code, field string }{
		{"relative", "GET", "?path=workspace/a", api.CodeInvalidPath, "path"},
		{"dotdot", "GET", "?path=/workspace/../etc/passwd", api.CodeInvalidPath, "path"},
		{"absolute outside", "GET", "?path=/etc/passwd", api.CodeInvalidPath, "path"},
		{"prefix trick", "GET", "?path=/workspacex/a", api.CodeInvalidPath, "path"},
		{"no path", "GET", "", api.CodeInvalidPath, "path"},
		{"two paths", "GET", "?path=/workspace/a&path=/workspace/b", api.CodeInvalidPath, "path"},
		{"not found", "GET", "?path=/workspace/nope", api.CodeNotFound, "path"},
		{"put outside", "PUT", "?path=/etc", api.CodeInvalidPath, "path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body io.Reader
			if tt.method == "PUT" {
				body = bytes.NewReader(tarOf(t, map[string]string{"x": "y"}))
			}
			r := c.do(t, tt.method, base+tt.query, body)
			e := r.apiError(t)
			if r.status != api.StatusOf(tt.code) || e.Code != tt.code || e.Field != tt.field {
				t.Fatalf("got %d %+v, want %s naming %q", r.status, e, tt.code, tt.field)
			}
		})
	}
	// $HOME is a root too.
	if r := c.do(t, "PUT", base+"?path="+sandboxd.DefaultHome, bytes.NewReader(tarOf(t, map[string]string{"h": "x"}))); r.status != 200 {
		t.Fatalf("put in $HOME: %d %s", r.status, r.body)
	}
	// A tar entry that climbs out is the executor's to refuse; the daemon
	// maps it.
	if r := c.do(t, "PUT", base+"?path=/workspace", bytes.NewReader(tarOf(t, map[string]string{"../evil": "x"}))); r.status != 400 || r.apiError(t).Code != api.CodeInvalidPath {
		t.Fatalf("climbing entry: %d %s", r.status, r.body)
	}
	if r := c.do(t, "PUT", base+"?path=/workspace", strings.NewReader("not a tar")); r.status != 400 {
		t.Fatalf("bad tar: %d %s", r.status, r.body)
	}
	// Over sandbox.max_upload: by its Content-Length, and streamed without one.
	big := tarOf(t, map[string]string{"big": strings.Repeat("x", 10000)})
	if r := c.do(t, "PUT", base+"?path=/workspace", bytes.NewReader(big)); r.status != 413 || r.apiError(t).Code != api.CodeTooLarge {
		t.Fatalf("big upload: %d %s", r.status, r.body)
	}
	if r := c.do(t, "PUT", base+"?path=/workspace", io.MultiReader(bytes.NewReader(big))); r.status != 413 {
		t.Fatalf("big chunked upload: %d %s", r.status, r.body)
	}
}

// sseEvent is one server-sent event.
type sseEvent struct {
	typ, data string
	comment   bool
}

func readSSE(sc *bufio.Scanner) *sseEvent {
	var ev sseEvent
	seen := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if seen {
				return &ev
			}
		case strings.HasPrefix(line, ":"):
			ev.comment, seen = true, true
		case strings.HasPrefix(line, "event: "):
			ev.typ, seen = strings.TrimPrefix(line, "event: "), true
		case strings.HasPrefix(line, "data: "):
			ev.data, seen = strings.TrimPrefix(line, "data: "), true
		}
	}
	return nil
}

func TestEvents(t *testing.T) {
	w := newFakeWorld(t)
	w.d.heartbeat = 50 * time.Millisecond
	c := w.client(alice)
	sb := c.create(t, `{}`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", c.base+"/v1/sandboxes/"+sb.ID+"/events", nil)
	resp, err := c.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	first := readSSE(sc)
	var ev api.Event
	if first == nil || first.typ != eventSandbox || json.Unmarshal([]byte(first.data), &ev) != nil || ev.Sandbox.ID != sb.ID {
		t.Fatalf("first event %+v, want the sandbox", first)
	}
	// A decision of this sandbox arrives, another sandbox's does not.
	_ = w.d.audit.Log(&audit.Record{ID: "r1", Sandbox: "sb-other", Kind: audit.KindHTTP, Decision: audit.DecisionAllow, Host: "other.example"})
	_ = w.d.audit.Log(&audit.Record{ID: "r2", Sandbox: sb.ID, Kind: audit.KindConnect, Decision: audit.DecisionDeny, Host: "evil.example"})
	var got *sseEvent
	sawPing := false
	for got == nil {
		e := readSSE(sc)
		if e == nil {
			t.Fatal("stream ended")
		}
		if e.comment {
			sawPing = true
			continue
		}
		got = e
	}
	if got.typ != eventDecision || !strings.Contains(got.data, `"host":"evil.example"`) {
		t.Fatalf("decision event %+v", got)
	}
	for !sawPing {
		e := readSSE(sc)
		if e == nil {
			t.Fatal("stream ended before a heartbeat")
		}
		sawPing = e.comment
	}
	// Delete: stopping, the end record as a decision, then stopped and the
	// stream ends.
	deleted := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("DELETE", c.base+"/v1/sandboxes/"+sb.ID, nil)
		resp, err := c.c.Do(req)
		if err != nil {
			deleted <- -1
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		deleted <- resp.StatusCode
	}()
	defer func() {
		if code := <-deleted; code != 200 {
			t.Errorf("delete: %d", code)
		}
	}()
	var types []string
	var last api.Event
	for {
		e := readSSE(sc)
		if e == nil {
			break
		}
		if e.comment {
			continue
		}
		types = append(types, e.typ)
		if e.typ == eventSandbox {
			last = api.Event{}
			_ = json.Unmarshal([]byte(e.data), &last)
		}
		if strings.Contains(e.data, "other.example") {
			t.Fatalf("another sandbox's record: %s", e.data)
		}
	}
	if last.Sandbox == nil || last.Sandbox.State != api.StateStopped || last.Sandbox.EndReason != ReasonDeleted {
		t.Fatalf("events after delete %v, last %+v: want the stopped sandbox last", types, last.Sandbox)
	}
	if !strings.Contains(strings.Join(types, ","), eventDecision) {
		t.Fatalf("events after delete %v: want the end record", types)
	}
}

// TestEgressCounters: a sandbox's counters count every decision, including
// those a summary record stands for, and denials by kind.
func TestEgressCounters(t *testing.T) {
	w := newFakeWorld(t)
	c := w.client(alice)
	sb := c.create(t, `{}`)
	extra := func(kv ...any) map[string]json.RawMessage {
		m := map[string]json.RawMessage{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)], _ = json.Marshal(kv[i+1])
		}
		return m
	}
	for _, r := range []*audit.Record{
		{Kind: audit.KindConnect, Decision: audit.DecisionAllow},
		{Kind: audit.KindHTTP, Decision: audit.DecisionAllow},
		{Kind: audit.KindClose, Decision: audit.DecisionAllow},
		{Kind: audit.KindExec, Decision: audit.DecisionAllow},
		{Kind: audit.KindConnect, Decision: audit.DecisionDeny},
		{Kind: audit.KindDNS, Decision: audit.DecisionDeny},
		{Kind: audit.KindSummary, Decision: audit.DecisionDeny, Extra: extra(audit.SummaryRequestsKey, 7, "by_kind", map[string]int{"http": 5, "connect": 2}, audit.SummaryByDecisionKey, map[string]int{"deny": 7})},
		{Kind: audit.KindDNS, Decision: audit.DecisionDeny, Extra: extra(audit.SummaryQueriesKey, 10, audit.SummaryByDecisionKey, map[string]int{"allow": 4, "deny": 6})},
		{Kind: audit.KindDrop, Decision: audit.DecisionDeny, Extra: extra(audit.SummarySuppressedKey, 3)},
	} {
		r.Sandbox = sb.ID
		if err := w.d.audit.Log(r); err != nil {
			t.Fatal(err)
		}
	}
	// Each carries its sandbox's owner (the daemon's stamp: gateway, DNS
	// filter, netns and executor know no owners).
	for _, r := range w.audit.Match(func(r audit.Record) bool { return r.Sandbox == sb.ID }) {
		if r.Owner != strconv.Itoa(alice) {
			t.Fatalf("record %s/%s has owner %q, want %d", r.Kind, r.Decision, r.Owner, alice)
		}
	}
	var got api.Sandbox
	c.json(t, "GET", "/v1/sandboxes/"+sb.ID, "").decode(t, &got)
	want := api.Egress{Allowed: 2 + 4, Denied: 1 + 1 + 7 + 6 + 3, DeniedByKind: map[string]int64{"connect": 1 + 2, "dns": 1 + 6, "http": 5, "drop": 3}}
	if got.Egress.Allowed != want.Allowed || got.Egress.Denied != want.Denied || !mapsEqual(got.Egress.DeniedByKind, want.DeniedByKind) {
		t.Fatalf("egress %+v, want %+v", got.Egress, want)
	}
	// A record the log refused is not counted.
	w.audit.Break(errAuditDown)
	_ = w.d.audit.Log(&audit.Record{Sandbox: sb.ID, Kind: audit.KindHTTP, Decision: audit.DecisionAllow})
	w.audit.Break(nil)
	c.json(t, "GET", "/v1/sandboxes/"+sb.ID, "").decode(t, &got)
	if got.Egress.Allowed != want.Allowed {
		t.Fatalf("allowed %d after a refused record, want %d", got.Egress.Allowed, want.Allowed)
	}
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestSummaryByOwner: a caller other than root sees its own sandboxes' rows
// of the summary only; root sees all.
func TestSummaryByOwner(t *testing.T) {
	w := newFakeWorld(t)
	a, b := w.client(alice), w.client(bob)
	sa, sb := a.create(t, `{}`), b.create(t, `{}`)
	_ = w.d.audit.Log(&audit.Record{Sandbox: sa.ID, Kind: audit.KindConnect, Decision: audit.DecisionAllow, Host: "alice.example", Port: 443})
	_ = w.d.audit.Log(&audit.Record{Sandbox: sb.ID, Kind: audit.KindConnect, Decision: audit.DecisionDeny, Host: "bob.example", Port: 443})
	var rows []api.SummaryRow
	b.json(t, "GET", "/v1/summary", "").decode(t, &rows)
	if len(rows) != 1 || rows[0].Host != "bob.example" || rows[0].Count != 1 {
		t.Fatalf("bob's summary %+v", rows)
	}
	w.client(0).json(t, "GET", "/v1/summary", "").decode(t, &rows)
	if len(rows) != 2 {
		t.Fatalf("root's summary %+v, want both", rows)
	}
}

func TestRun(t *testing.T) {
	w := newFakeWorld(t)
	c := w.client(alice)
	r := c.json(t, "POST", "/v1/run", `{"argv": ["sh", "-c", "cat; echo err >&2; exit 7"], "stdin": "in\n", "labels": {"a": "b"}, "limits": {"exec_timeout": "30s"}}`)
	var res api.RunResponse
	r.decode(t, &res)
	if r.status != 200 || res.ExitStatus != 7 || res.Stdout != "in\n" || res.Stderr != "err\n" || res.ID == "" {
		t.Fatalf("run: %d %+v", r.status, res)
	}
	w.d.reg.waitTeardowns()
	if w.d.reg.len() != 0 || w.net.tornDown(res.ID) != 1 {
		t.Fatal("the run's sandbox was not deleted")
	}
	endRecord(t, w, res.ID, ReasonDeleted)
	r = c.json(t, "POST", "/v1/run", `{"argv": ["alk-no-such-command"]}`)
	r.decode(t, &res)
	if r.status != 200 || res.ExitStatus != 127 || res.Error == "" {
		t.Fatalf("run of a missing command: %d %+v", r.status, res)
	}
	for _, tt := range []struct{ body, field string }{
		{`{"argv": []}`, "argv"},
		{`{"argv": ["true"], "id": "x"}`, "id"},
		{`{"argv": ["true"], "limits": {"pids": -5}}`, "limits.pids"},
	} {
		r := c.json(t, "POST", "/v1/run", tt.body)
		if e := r.apiError(t); r.status != 400 || e.Field != tt.field {
			t.Fatalf("run %s: %d %+v, want 400 naming %s", tt.body, r.status, e, tt.field)
		}
	}
	if n := w.d.metricValue(t, "airlock_exec_seconds", ""); n != 1 {
		t.Fatalf("exec latency samples %v, want 1", n)
	}
}

func TestNoRoute(t *testing.T) {
	w := newFakeWorld(t)
	c := w.client(alice)
	r := c.json(t, "GET", "/v1/nope", "")
	if r.status != 404 || r.apiError(t).Code != api.CodeNotFound {
		t.Fatalf("unknown route: %d %s", r.status, r.body)
	}
	r = c.json(t, "PATCH", "/v1/sandboxes", "")
	if r.status != 405 || r.header.Get("Allow") != "GET, POST" {
		t.Fatalf("wrong method: %d %s allow %q", r.status, r.body, r.header.Get("Allow"))
	}
}

// TestConnContextReadsPeerCredentials: over a real unix socket the caller
// is the peer process's uid, whatever the request says.
func TestConnContextReadsPeerCredentials(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan caller, 1)
	srv := &http.Server{ConnContext: ConnContext, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := callerFrom(r.Context())
		if !ok {
			c = caller{uid: -1}
		}
		got <- c
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	cl := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	req, _ := http.NewRequest("GET", "http://airlock/v1/health", nil)
	req.Header.Set("X-Uid", "0")
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	c := <-got
	if c.uid != os.Getuid() || c.pid != os.Getpid() {
		t.Fatalf("caller %+v, want uid %d pid %d", c, os.Getuid(), os.Getpid())
	}
	// Not a unix socket: no caller.
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(tcp)
	resp, err = http.Get("http://" + tcp.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if c := <-got; c.uid != -1 {
		t.Fatalf("caller over tcp %+v, want none", c)
	}
}

// TestEgressDestinations pins what run's summary through a daemon lacked:
// the sandbox's egress lists its destinations (as GET /v1/summary's rows),
// and a report-mode denial is counted as would_deny, not denied.
func TestEgressDestinations(t *testing.T) {
	w := newFakeWorld(t)
	c := w.client(alice)
	sb := c.create(t, `{}`)
	for _, r := range []*audit.Record{
		{Kind: audit.KindConnect, Decision: audit.DecisionAllow, Host: "pypi.org", Port: 443},
		{Kind: audit.KindConnect, Decision: audit.DecisionAllow, Host: "pypi.org", Port: 443},
		{Kind: audit.KindHTTP, Decision: audit.DecisionDeny, Mode: audit.ModeEnforce, Host: "evil.example", Port: 80},
		{Kind: audit.KindHTTP, Decision: audit.DecisionDeny, Mode: audit.ModeReport, Host: "reported.example", Port: 80},
		{Kind: audit.KindExec, Decision: audit.DecisionAllow},
	} {
		r.Sandbox = sb.ID
		if err := w.d.audit.Log(r); err != nil {
			t.Fatal(err)
		}
	}
	want := []api.SummaryRow{
		{Decision: audit.DecisionDeny, Kind: audit.KindHTTP, Host: "evil.example", Port: 80, Count: 1},
		{Decision: audit.OutcomeWouldDeny, Kind: audit.KindHTTP, Host: "reported.example", Port: 80, Count: 1},
		{Decision: audit.DecisionAllow, Kind: audit.KindConnect, Host: "pypi.org", Port: 443, Count: 2},
	}
	check := func(what string, e api.Egress) {
		t.Helper()
		if e.Allowed != 2 || e.Denied != 1 || e.WouldDeny != 1 || !slices.Equal(e.Destinations, want) || e.DestinationsOmitted != 0 {
			t.Errorf("%s: got %+v, want 2 allowed, 1 denied, 1 would deny, destinations %+v", what, e, want)
		}
	}
	var got api.Sandbox
	c.json(t, "GET", "/v1/sandboxes/"+sb.ID, "").decode(t, &got)
	check("GET", got.Egress)
	c.json(t, "DELETE", "/v1/sandboxes/"+sb.ID, "").decode(t, &got)
	check("DELETE", got.Egress)
}

// TestEventsHistory pins what a user trial found: sandbox logs showed only
// live events, and a developer who is not root cannot read the audit log.
// The events stream with history=true sends the sandbox's kept records to
// its owner (since filters them, follow=false ends the stream after them);
// another uid gets 404 and nothing of them; bad parameters are 400s naming
// the field.
func TestEventsHistory(t *testing.T) {
	w := newFakeWorld(t)
	a, b := w.client(alice), w.client(bob)
	sb := a.create(t, `{}`)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i, host := range []string{"old.example", "evil.example", "reported.example"} {
		r := &audit.Record{Sandbox: sb.ID, Kind: audit.KindHTTP, Decision: audit.DecisionDeny, Host: host, Port: 80, TS: t0.Add(time.Duration(i) * time.Minute)}
		if host == "reported.example" {
			r.Mode = audit.ModeReport
		}
		if err := w.d.audit.Log(r); err != nil {
			t.Fatal(err)
		}
	}
	events := func(c *apiClient, query string) (int, []string) {
		t.Helper()
		r := c.do(t, "GET", "/v1/sandboxes/"+sb.ID+"/events"+query, nil)
		var hosts []string
		sc := bufio.NewScanner(bytes.NewReader(r.body))
		for e := readSSE(sc); e != nil; e = readSSE(sc) {
			var ev api.Event
			if e.comment || json.Unmarshal([]byte(e.data), &ev) != nil || ev.Record == nil || ev.Record["kind"] != audit.KindHTTP {
				continue
			}
			if !ev.History {
				t.Errorf("%s: a record not marked history: %s", query, e.data)
			}
			hosts = append(hosts, fmt.Sprint(ev.Record["host"]))
		}
		return r.status, hosts
	}
	tests := []struct {
		name  string
		c     *apiClient
		query string
		code  int
		hosts string
	}{
		{"owner", a, "?history=true&follow=false", 200, "old.example,evil.example,reported.example"},
		{"owner since", a, "?since=" + t0.Add(time.Minute).Format(time.RFC3339) + "&follow=false", 200, "evil.example,reported.example"},
		{"owner without history", a, "?follow=false", 200, ""},
		{"another uid", b, "?history=true&follow=false", 404, ""},
		{"bad since", a, "?since=yesterday&follow=false", 400, ""},
		{"bad history", a, "?history=maybe&follow=false", 400, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, hosts := events(tt.c, tt.query)
			if code != tt.code || strings.Join(hosts, ",") != tt.hosts {
				t.Errorf("got %d %v, want %d %s", code, hosts, tt.code, tt.hosts)
			}
		})
	}
	r := a.do(t, "GET", "/v1/sandboxes/"+sb.ID+"/events?since=yesterday", nil)
	if e := r.apiError(t); e.Code != api.CodeInvalidField || e.Field != "since" {
		t.Errorf("bad since: got %+v, want invalid_field since", e)
	}
}

// TestRunRecordIsACreationRecord: the creation record airlock run writes is
// read as a daemon sandbox's is (labels and mode), so policy suggest --label
// learns from a run's records.
func TestRunRecordIsACreationRecord(t *testing.T) {
	w := newFakeWorld(t)
	r := w.d.runRecord(policy.Sandbox{ID: "run-1", Labels: map[string]string{"team": "ml"}})
	b := learn.NewRebuilder()
	b.Observe(r)
	if got := b.Sandbox("run-1"); got.Labels["team"] != "ml" || got.Mode != policy.Mode(w.d.cfg.Policy.Mode) {
		t.Errorf("rebuilt sandbox: got %+v, want label team=ml and mode %q", got, w.d.cfg.Policy.Mode)
	}
	if r.Kind != audit.KindSandbox || r.Decision != audit.DecisionAllow || !audittest.HasReason(*r, ReasonCreated) {
		t.Errorf("record: got %+v, want kind sandbox, allow, reason created", r)
	}
}
