package dnsfilter

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/policy/policytest"
	"github.com/airlock-dev/airlock/test/poll"
)

// summaryOf decodes a summary record's extra fields.
type summaryOf struct {
	Queries    int            `json:"queries"`
	ByDecision map[string]int `json:"by_decision"`
	ByRCode    map[string]int `json:"by_rcode"`
	ByQType    map[string]int `json:"by_qtype"`
	ByFlag     map[string]int `json:"by_flag"`
	Forwarded  int            `json:"forwarded"`
	Distinct   int            `json:"distinct_names"`
	Capped     bool           `json:"distinct_names_capped"`
	TopNames   []struct {
		Name  string `json:"name"`
		Count int    `json:"count"`
	} `json:"top_names"`
	WindowStart time.Time `json:"window_start"`
	WindowEnd   time.Time `json:"window_end"`
	Final       bool      `json:"final"`
}

func decodeSummary(t *testing.T, r audit.Record) summaryOf {
	t.Helper()
	raw, err := json.Marshal(r.Extra)
	if err != nil {
		t.Fatal(err)
	}
	var s summaryOf
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("summary extra %s: %v", raw, err)
	}
	return s
}

func isSummary(r audit.Record) bool {
	return len(r.Reasons) == 1 && r.Reasons[0].ID == ReasonAuditSummary
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// TestAuditFloodSummarized pins the audit-flood fix: a sandbox spraying queries
// used to get one audit record per packet, growing the log at packet rate. Past
// its audit budget, queries are counted into summaries, and every query is in
// exactly one record or one summary.
func TestAuditFloodSummarized(t *testing.T) {
	up := startUpstream(t, records(testZone))
	const (
		burst    = 40
		rate     = 20.0
		topN     = 3
		workers  = 4
		perWork  = 450
		total    = workers * perWork
		interval = 40 * time.Millisecond
	)
	e := newEnv(t, Config{AuditBurst: burst, AuditRate: rate, AuditSummaryInterval: interval, AuditTopNames: topN},
		up, policytest.AllowUnder("pypi.org"))

	// Each worker sends, one at a time: pypi.org (allowed, cached), evil.example.com
	// (denied), a packet with no question (FORMERR from the header check) and, every
	// tenth query, a new name under pypi.org (forwarded, until many_unique_names
	// blocks it).
	sent := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			c := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
			local := map[string]int{}
			for i := range perWork {
				var m *dns.Msg
				var name string
				switch {
				case i%10 == 9:
					name = fmt.Sprintf("u%d-%d.pypi.org", w, i)
				case i%3 == 0:
					name = "pypi.org"
				case i%3 == 1:
					name = "evil.example.com"
				}
				if name == "" {
					m = new(dns.Msg)
					m.Id = dns.Id()
				} else {
					m = new(dns.Msg)
					m.SetQuestion(name+".", dns.TypeA)
				}
				r, _, err := c.Exchange(m, e.udp)
				if err != nil {
					t.Errorf("query %d (%q): %v", i, name, err)
					return
				}
				if name == "" && r.Rcode != dns.RcodeFormatError {
					t.Errorf("no-question packet: got %s, want FORMERR", dns.RcodeToString[r.Rcode])
				}
				local[name]++
			}
			mu.Lock()
			for k, v := range local {
				sent[k] += v
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	e.f.StopSandbox("sb-1")
	elapsed := time.Since(start)

	recs := e.aud.Records()
	individual := 0
	perName := map[string]int{}
	var sums []summaryOf
	for _, r := range recs {
		if r.Sandbox != "sb-1" || r.Kind != audit.KindDNS {
			t.Errorf("unexpected record %+v", r)
			continue
		}
		if !isSummary(r) {
			individual++
			perName[r.QName]++
			continue
		}
		s := decodeSummary(t, r)
		sums = append(sums, s)
		if r.Decision != audit.DecisionDeny && len(s.ByDecision) > 1 {
			t.Errorf("summary of mixed decisions %v: got decision %q, want deny", s.ByDecision, r.Decision)
		}
		if sum(s.ByDecision) != s.Queries || sum(s.ByRCode) != s.Queries || sum(s.ByQType) != s.Queries {
			t.Errorf("summary counts disagree: queries %d, by_decision %v, by_rcode %v, by_qtype %v", s.Queries, s.ByDecision, s.ByRCode, s.ByQType)
		}
		if len(s.TopNames) > topN || len(s.TopNames) > s.Distinct {
			t.Errorf("top_names %v: want at most %d and at most distinct_names (%d)", s.TopNames, topN, s.Distinct)
		}
		for _, tn := range s.TopNames {
			perName[tn.Name] += tn.Count
		}
		if len(r.Flags) != len(s.ByFlag) {
			t.Errorf("summary flags %v, by_flag %v: want the same flags", r.Flags, s.ByFlag)
		}
	}
	summarized := 0
	for i, s := range sums {
		summarized += s.Queries
		if i > 0 && s.WindowStart.Before(sums[i-1].WindowEnd) {
			t.Errorf("summary %d window starts %v before the previous one ended (%v): one summary per interval", i, s.WindowStart, sums[i-1].WindowEnd)
		}
		if s.Final != (i == len(sums)-1) {
			t.Errorf("summary %d of %d: final=%v, want only the last one final", i, len(sums), s.Final)
		}
	}
	if individual+summarized != total {
		t.Fatalf("got %d individual records + %d summarized queries = %d, want every one of the %d queries counted once",
			individual, summarized, individual+summarized, total)
	}
	if len(sums) == 0 {
		t.Fatalf("no summary record for %d queries with a burst of %d", total, burst)
	}
	// The budget bounds the log: at most burst + rate*elapsed individual records,
	// plus one summary per interval (and the final one).
	if maxInd := burst + int(rate*elapsed.Seconds()) + 1; individual > maxInd {
		t.Errorf("got %d individual records in %v, want at most %d (burst %d, %v/s)", individual, elapsed, maxInd, burst, rate)
	}
	if maxSums := int(elapsed/interval) + 2; len(sums) > maxSums {
		t.Errorf("got %d summaries in %v, want at most %d (one per %v and a final one)", len(sums), elapsed, maxSums, interval)
	}
	// The two heavy names lead every summary they are in (ties sort by name, and
	// every other name is asked once), so their totals are exact.
	for _, name := range []string{"pypi.org", "evil.example.com"} {
		if perName[name] != sent[name] {
			t.Errorf("%s: got %d (records + top_names), want %d sent", name, perName[name], sent[name])
		}
	}
	var all summaryOf
	all.ByRCode, all.ByDecision = map[string]int{}, map[string]int{}
	for _, s := range sums {
		for k, v := range s.ByRCode {
			all.ByRCode[k] += v
		}
		for k, v := range s.ByDecision {
			all.ByDecision[k] += v
		}
		all.Forwarded += s.Forwarded
	}
	if all.ByRCode["FORMERR"] == 0 || all.ByRCode["NXDOMAIN"] == 0 || all.ByRCode["NOERROR"] == 0 {
		t.Errorf("summed by_rcode %v: want FORMERR, NXDOMAIN and NOERROR all present", all.ByRCode)
	}
	if all.ByDecision[audit.DecisionAllow] == 0 || all.ByDecision[audit.DecisionDeny] == 0 {
		t.Errorf("summed by_decision %v: want allow and deny", all.ByDecision)
	}
	t.Logf("%d queries in %v: %d individual records, %d summaries (%d queries), %d forwarded in summaries",
		total, elapsed, individual, len(sums), summarized, all.Forwarded)
}

// TestAuditSummaryFailsClosed: while the audit logger refuses records, an
// over-budget query that would be allowed gets SERVFAIL, and the refused
// summary is carried over until the logger accepts it: no count is lost.
func TestAuditSummaryFailsClosed(t *testing.T) {
	up := startUpstream(t, records(testZone))
	e := newEnv(t, Config{AuditBurst: 1, AuditRate: 0.001, AuditSummaryInterval: 20 * time.Millisecond}, up, policytest.AllowUnder("pypi.org"))
	setFail := func(v bool) {
		if v {
			e.aud.Refuse(audittest.Full)
		} else {
			e.aud.Refuse(nil)
		}
	}
	if r := e.ask(t, "udp", "pypi.org.", dns.TypeA); r.Rcode != dns.RcodeSuccess {
		t.Fatalf("first query (within budget): got %s, want NOERROR", dns.RcodeToString[r.Rcode])
	}
	setFail(true)
	// Over budget: counted into a summary whose write will be refused.
	if r := e.ask(t, "udp", "pypi.org.", dns.TypeA); r.Rcode != dns.RcodeSuccess {
		t.Fatalf("second query: got %s, want NOERROR (the logger has not refused anything yet)", dns.RcodeToString[r.Rcode])
	}
	poll.Until(t, 5*time.Second, "the summary write to be refused", e.f.auditFailing.Load)
	r := e.ask(t, "udp", "pypi.org.", dns.TypeA)
	if r.Rcode != dns.RcodeServerFailure || len(r.Answer) != 0 {
		t.Fatalf("over budget with the audit logger refusing: got %s %v, want SERVFAIL without answers", dns.RcodeToString[r.Rcode], r.Answer)
	}
	setFail(false)
	got := decodeSummary(t, e.aud.Wait(t, "the carried-over summary", isSummary))
	if got.Queries != 2 || got.ByRCode["NOERROR"] != 1 || got.ByRCode["SERVFAIL"] != 1 {
		t.Errorf("carried-over summary: got queries %d by_rcode %v, want 2 (one NOERROR, one SERVFAIL)", got.Queries, got.ByRCode)
	}
	if e.f.auditFailing.Load() {
		t.Errorf("auditFailing still set after the logger accepted a record")
	}
}
