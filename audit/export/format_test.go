package export

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

func testEvent(t *testing.T, r audit.Record) Event {
	t.Helper()
	r.Seq, r.Prev, r.TS = 42, strings.Repeat("a", 64), time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	line, err := json.Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	e, err := newEvent(line)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// get walks a decoded JSON object along a dotted path.
func get(m map[string]any, path string) any {
	var v any = m
	for _, k := range strings.Split(path, ".") {
		o, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = o[k]
	}
	return v
}

func TestOCSFMapping(t *testing.T) {
	base := audit.Record{ID: "d-1", Sandbox: "sb-1", Owner: "1000", PolicyRev: "rev-7", Host: "pypi.org", Port: 443, IP: "198.18.0.5"}
	tests := []struct {
		name string
		rec  func(r *audit.Record)
		want map[string]any
	}{
		{name: "http allow", rec: func(r *audit.Record) {
			r.Kind, r.Decision, r.Method, r.Path, r.Status = audit.KindHTTP, audit.DecisionAllow, "GET", "/simple/", 200
			r.Reasons = []audit.Reason{{ID: "allow_host", Msg: "allowed"}}
		}, want: map[string]any{"class_uid": 4002.0, "category_uid": 4.0, "activity_id": 3.0, "type_uid": 400203.0, "severity_id": 1.0,
			"status_id": 1.0, "action_id": 1.0, "disposition_id": 1.0, "http_request.http_method": "GET", "http_request.url.hostname": "pypi.org",
			"http_request.url.path": "/simple/", "http_request.url.port": 443.0, "http_response.code": 200.0, "dst_endpoint.ip": "198.18.0.5",
			"src_endpoint.uid": "sb-1", "src_endpoint.owner.uid": "1000", "firewall_rule.uid": "allow_host", "firewall_rule.version": "rev-7",
			"metadata.product.name": "airlock", "metadata.version": OCSFVersion, "metadata.uid": "d-1", "metadata.sequence": 42.0,
			"time": float64(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC).UnixMilli()), "unmapped.seq": 42.0, "unmapped.prev": strings.Repeat("a", 64)}},
		{name: "connect deny", rec: func(r *audit.Record) {
			r.Kind, r.Decision = audit.KindConnect, audit.DecisionDeny
			r.Reasons = []audit.Reason{{ID: "host_not_allowed", Msg: "no"}}
		}, want: map[string]any{"class_uid": 4002.0, "activity_id": 1.0, "type_uid": 400201.0, "severity_id": 3.0, "status_id": 2.0,
			"action_id": 2.0, "disposition_id": 2.0, "status_detail": "host_not_allowed", "message": "no"}},
		{name: "deny in report mode was let through", rec: func(r *audit.Record) {
			r.Kind, r.Decision, r.Mode, r.Method = audit.KindHTTP, audit.DecisionDeny, "report", "PATCH"
		}, want: map[string]any{"activity_id": 99.0, "action_id": 1.0, "disposition_id": 15.0, "unmapped.mode": "report"}},
		{name: "dns", rec: func(r *audit.Record) {
			r.Kind, r.Decision, r.QName, r.QType, r.RCode = audit.KindDNS, audit.DecisionAllow, "pypi.org.", "A", "NOERROR"
			r.Answers = []audit.Answer{{Type: "A", Data: "198.18.0.5", TTL: 30}}
		}, want: map[string]any{"class_uid": 4003.0, "activity_id": 1.0, "type_uid": 400301.0, "query.hostname": "pypi.org.", "query.type": "A", "rcode": "NOERROR"}},
		{name: "tls error", rec: func(r *audit.Record) { r.Kind, r.Decision = audit.KindTLS, audit.DecisionError },
			want: map[string]any{"class_uid": 4001.0, "activity_id": 4.0, "type_uid": 400104.0, "severity_id": 4.0}},
		{name: "pod", rec: func(r *audit.Record) {
			r.Kind, r.Decision = audit.KindTCP, audit.DecisionDeny
			r.Pod = &audit.Pod{Namespace: "ci", Name: "agent-0", UID: "u-1"}
		}, want: map[string]any{"unmapped.pod.namespace": "ci", "unmapped.pod.name": "agent-0", "unmapped.pod.uid": "u-1", "unmapped.owner": "1000"}},
		{name: "exec is a base event", rec: func(r *audit.Record) { r.Kind = audit.KindExec; r.Exec = &audit.Exec{Phase: audit.ExecStart} },
			want: map[string]any{"class_uid": 0.0, "category_uid": 0.0, "type_uid": 99.0, "unmapped.exec.phase": "start"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := base
			tt.rec(&r)
			e := testEvent(t, r)
			var got map[string]any
			if err := json.Unmarshal(ocsfEvent(&e, "1.2.3"), &got); err != nil {
				t.Fatal(err)
			}
			if h := get(got, "unmapped.hash"); h != e.Hash {
				t.Errorf("unmapped.hash: got %v, want %v", h, e.Hash)
			}
			for k, want := range tt.want {
				if v := get(got, k); v != want {
					t.Errorf("%s: got %v, want %v", k, v, want)
				}
			}
		})
	}
}

func TestSyslogMessage(t *testing.T) {
	s := &syslogSink{host: "gw 1", nowFunc: time.Now}
	tests := []struct {
		name     string
		decision string
		wantPRI  string
	}{
		{name: "allow is informational", decision: audit.DecisionAllow, wantPRI: "<110>1 "},
		{name: "deny is a warning", decision: audit.DecisionDeny, wantPRI: "<108>1 "},
		{name: "error is an error", decision: audit.DecisionError, wantPRI: "<107>1 "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := testEvent(t, audit.Record{Kind: audit.KindHTTP, Decision: tt.decision, Host: "evil.example",
				Reasons: []audit.Reason{{ID: `a"b]c\d`, Msg: "m"}}})
			msg := string(s.message(&e))
			want := tt.wantPRI + "2026-11-23T10:00:00.000000Z gw_1 airlock - http [airlock@32473 seq=\"42\" prev=\"" + strings.Repeat("a", 64) +
				"\" hash=\"" + e.Hash + "\" kind=\"http\" decision=\"" + tt.decision + "\" reasons=\"a\\\"b\\]c\\\\d\" host=\"evil.example\"] \xef\xbb\xbf" + string(e.Line)
			if msg != want {
				t.Fatalf("got  %q\nwant %q", msg, want)
			}
		})
	}
	// A record's node is its HOSTNAME, and a field like any other.
	e := testEvent(t, audit.Record{Node: "node-a.cluster", Kind: audit.KindDNS, Decision: audit.DecisionAllow})
	if msg := string(s.message(&e)); !strings.HasPrefix(msg, "<110>1 2026-11-23T10:00:00.000000Z node-a.cluster airlock - dns [") ||
		!strings.Contains(msg, ` node="node-a.cluster"`) {
		t.Fatalf("record with a node: got %q, want HOSTNAME node-a.cluster and a node SD-PARAM", msg)
	}
	pe := testEvent(t, audit.Record{Kind: audit.KindTCP, Decision: audit.DecisionDeny, Sandbox: "alk-pod-1",
		Pod: &audit.Pod{Namespace: "ci", Name: "agent-0", ServiceAccount: "runner"}})
	if msg := string(s.message(&pe)); !strings.Contains(msg, `sandbox="alk-pod-1" pod.namespace="ci" pod.name="agent-0" pod.service_account="runner"`) {
		t.Errorf("pod fields: got %q, want the pod's given fields after the sandbox", msg)
	}
	g := Event{Gap: &Gap{From: 1, Through: 9, Reason: "gone"}}
	if msg := string(s.message(&g)); !strings.HasPrefix(msg, "<106>1 ") || !strings.Contains(msg, `gap_from_seq="1" gap_through_seq="9"`) {
		t.Fatalf("gap marker: got %q, want PRI 106 (critical) and the seqs", msg)
	}
}

// TestOCSFNode: the node is OCSF's reporting device, and kept unmapped.
func TestOCSFNode(t *testing.T) {
	e := testEvent(t, audit.Record{Node: "node-a", Kind: audit.KindTCP, Decision: audit.DecisionDeny})
	var got map[string]any
	if err := json.Unmarshal(ocsfEvent(&e, "test"), &got); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"device.hostname": "node-a", "device.name": "node-a", "unmapped.node": "node-a"} {
		if v := get(got, k); v != want {
			t.Errorf("%s: got %v, want %v", k, v, want)
		}
	}
	e = testEvent(t, audit.Record{Kind: audit.KindTCP, Decision: audit.DecisionDeny})
	got = nil
	if err := json.Unmarshal(ocsfEvent(&e, "test"), &got); err != nil {
		t.Fatal(err)
	}
	if _, ok := got["device"]; ok {
		t.Errorf("a record without a node: got device %v, want none", got["device"])
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{name: "unknown format", cfg: Config{Format: "cef"}, wantErr: `format "cef"`},
		{name: "otlp without endpoint", cfg: Config{Format: FormatOTLP}, wantErr: "otlp sink endpoint"},
		{name: "otlp wrong scheme", cfg: Config{Format: FormatOTLP, Endpoint: "tcp://127.0.0.1:1"}, wantErr: "grpcs://"},
		{name: "syslog udp", cfg: Config{Format: FormatSyslog, Endpoint: "udp://127.0.0.1:514"}, wantErr: "tcp://host:port or tls://host:port"},
		{name: "jsonl url", cfg: Config{Format: FormatJSONL, Endpoint: "http://x"}, wantErr: "a file path"},
		{name: "backoff", cfg: Config{Format: FormatJSONL, BackoffMin: time.Second, BackoffMax: time.Millisecond}, wantErr: "backoff_max"},
		{name: "batch", cfg: Config{Format: FormatJSONL, BatchSize: -1}, wantErr: "batch_size"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.cfg.withDefaults()
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}
