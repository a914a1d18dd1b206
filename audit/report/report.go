package report

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// FormatVersion is the version of the JSON aggregates' shape.
const FormatVersion = 1

// Labels of folded rows.
const (
	Other          = "(other)"           // destinations past MaxCells, rows past TopN
	OtherSandboxes = "(other sandboxes)" // sandboxes past MaxSandboxes
	Summarized     = "(summarized)"      // events a summary record counts without a destination
	NoSandbox      = "(none)"            // records without a sandbox
)

// Report is the aggregates of one or more audit files: what the JSON output
// is and what the HTML page embeds and draws.
type Report struct {
	Version      int          `json:"version"`
	Generated    time.Time    `json:"generated"`
	Files        []string     `json:"files"`
	Selection    Selection    `json:"selection"`
	Verification Verification `json:"verification"`
	Scope        Scope        `json:"scope"`
	Totals       Counts       `json:"totals"`
	Sandboxes    []Row        `json:"sandboxes"`
	Destinations []Row        `json:"destinations"`
	TopDenied    []DeniedRow  `json:"top_denied"`
	// Who is what ran in each sandbox and for whom.
	Who []SandboxInfo `json:"who"`
	// Bypass is the attempts to get around the proxy.
	Bypass   []BypassRow `json:"bypass"`
	Timeline Timeline    `json:"timeline"`
	Cells    Cells       `json:"cells"`
	DNS      DNS         `json:"dns"`
	Secrets  []SecretUse `json:"secrets"`
	// Findings are content inspection's, by detector, destination and sandbox.
	Findings []FindingRow `json:"findings"`
	Drops    []DropRow    `json:"drops"`
	Budgets  []BudgetRow  `json:"budgets"`
	Events   []Event      `json:"events"`
}

// Selection is what the report was asked to cover.
type Selection struct {
	Sandbox string            `json:"sandbox,omitempty"`
	Mode    string            `json:"mode,omitempty"`
	Owner   string            `json:"owner,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	Since   time.Time         `json:"since,omitzero"`
	Until   time.Time         `json:"until,omitzero"`
}

// Verification is audit.Verify's result over the whole files, and what it
// could not check.
type Verification struct {
	OK                bool     `json:"ok"`
	Error             string   `json:"error,omitempty"`
	Lines             int      `json:"lines"`
	Records           int      `json:"records"`
	Checkpoints       int      `json:"checkpoints"`
	FirstSeq          uint64   `json:"first_seq"`
	LastSeq           uint64   `json:"last_seq"`
	Head              string   `json:"head,omitempty"`
	SignaturesChecked bool     `json:"signatures_checked"`
	SignedThrough     uint64   `json:"signed_through,omitempty"`
	Unsigned          int      `json:"unsigned"`
	PrunedThrough     uint64   `json:"pruned_through,omitempty"`
	NotChecked        []string `json:"not_checked,omitempty"`
}

// Scope says what was read and how it was folded.
type Scope struct {
	Records  int64            `json:"records"` // records matching the selection (checkpoints excluded)
	FirstTS  time.Time        `json:"first_ts,omitzero"`
	LastTS   time.Time        `json:"last_ts,omitzero"`
	ByKind   map[string]int64 `json:"by_kind"`
	Notes    []string         `json:"notes"`
	Folded   map[string]int64 `json:"folded,omitempty"` // what was folded into "(other)" rows, by table
	Caps     map[string]int   `json:"caps"`
	Counting string           `json:"counting"`
}

// Counts are decisions and bytes. Denied counts enforced denials only;
// WouldDeny counts the requests report mode let through that enforce mode
// would have refused (audit.WouldDeny): they reached their destination.
type Counts struct {
	Allowed   int64 `json:"allowed"`
	Denied    int64 `json:"denied"`
	WouldDeny int64 `json:"would_deny"`
	Errors    int64 `json:"errors"`
	BytesUp   int64 `json:"bytes_up"`
	BytesDown int64 `json:"bytes_down"`
}

// Row is Counts for one sandbox or destination.
type Row struct {
	Key string `json:"key"`
	Counts
}

// DeniedRow is a destination's refusals (denied and errors) for one reason
// id, or (Outcome would_deny) the requests report mode let through for it.
type DeniedRow struct {
	Destination string `json:"destination"`
	Reason      string `json:"reason"`
	// Outcome is deny (enforced denials and errors) or would_deny.
	Outcome   string `json:"outcome"`
	Count     int64  `json:"count"`
	Sandboxes int    `json:"sandboxes"`
	// Samples are up to 3 distinct requests (method and path) behind it.
	Samples []string `json:"samples"`
}

// Timeline is counts per bucket, sandbox, kind and decision, as rows of
// numbers (Columns names them; sandbox, kind and decision index Cells.Dict).
type Timeline struct {
	Start         time.Time `json:"start,omitzero"`
	BucketSeconds int64     `json:"bucket_seconds"`
	Buckets       int       `json:"buckets"`
	Columns       []string  `json:"columns"`
	Rows          [][]int64 `json:"rows"`
}

// Cells are counts per (sandbox, kind, decision, destination, first reason),
// as rows of numbers indexing Dict, for the page to filter and group.
type Cells struct {
	Dict    Dict      `json:"dict"`
	Columns []string  `json:"columns"`
	Rows    [][]int64 `json:"rows"`
}

// Dict holds the strings Timeline and Cells rows index.
type Dict struct {
	Sandbox  []string `json:"sandbox"`
	Kind     []string `json:"kind"`
	Decision []string `json:"decision"`
	Dest     []string `json:"dest"`
	Reason   []string `json:"reason"`
}

// DNS is the DNS filter's exfiltration flags.
type DNS struct {
	Queries int64     `json:"queries"` // DNS questions (summarized ones included)
	Flagged int64     `json:"flagged"` // of which carried at least one flag
	ByFlag  []FlagRow `json:"by_flag"`
	Names   []DNSName `json:"names"` // top flagged domains
}

// FlagRow counts one flag in one sandbox; Summarized is the part counted by
// the DNS filter's summary records.
type FlagRow struct {
	Sandbox    string `json:"sandbox"`
	Flag       string `json:"flag"`
	Count      int64  `json:"count"`
	Summarized int64  `json:"summarized"`
}

// DNSName is flagged queries under one registrable domain.
type DNSName struct {
	Sandbox  string   `json:"sandbox"`
	Domain   string   `json:"domain"`
	Flags    []string `json:"flags"`
	Count    int64    `json:"count"`
	Denied   int64    `json:"denied"`
	Distinct int      `json:"distinct_names"` // capped at maxDistinctNames
	Example  string   `json:"example"`
}

// SecretUse is the uses of one secret version at one destination: never a value.
type SecretUse struct {
	Sandbox     string    `json:"sandbox"`
	ID          string    `json:"id"`
	Version     string    `json:"version"`
	Fingerprint string    `json:"fingerprint"`
	Where       string    `json:"where,omitempty"`
	Destination string    `json:"destination"`
	Decision    string    `json:"decision"`
	Count       int64     `json:"count"`
	First       time.Time `json:"first"`
	Last        time.Time `json:"last"`
}

// DropRow is one sandbox's dropped packets: logged one by one, and counted by
// netns's rate-limited summaries.
type DropRow struct {
	Sandbox    string `json:"sandbox"`
	Logged     int64  `json:"logged"`
	Suppressed int64  `json:"suppressed"`
}

// BudgetRow is one sandbox's audit-budget summaries from one source
// (gateway: kind summary; dns: the DNS filter's).
type BudgetRow struct {
	Sandbox    string           `json:"sandbox"`
	Source     string           `json:"source"`
	Summaries  int64            `json:"summaries"`
	Events     int64            `json:"events"`
	ByDecision map[string]int64 `json:"by_decision,omitempty"`
	ByReason   map[string]int64 `json:"by_reason,omitempty"`
	Final      bool             `json:"final"`
	First      time.Time        `json:"first"`
	Last       time.Time        `json:"last"`
}

// Event is a record about the log itself: crash_recovered, audit_outage,
// retention.
type Event struct {
	Seq    uint64    `json:"seq"`
	TS     time.Time `json:"ts"`
	Kind   string    `json:"kind"`
	Detail string    `json:"detail"`
}

// Build verifies cfg.Files as one chain and, in the same pass (each record
// is decoded once, by audit.Verify), aggregates the records that match the
// selection. A broken chain is reported in Verification, not returned as an
// error: the page must say so; the records are then aggregated again by
// audit.Query, which reads past the break. The error is for files that cannot
// be read or records that are not JSON.
func Build(ctx context.Context, cfg Config) (*Report, error) {
	cfg.applyDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	f := audit.Filter{Sandbox: cfg.Sandbox, Since: cfg.Since, Until: cfg.Until, Mode: cfg.Mode, Owner: cfg.Owner, Labels: cfg.Labels}
	agg := newAggregator(&cfg)
	ver := verify(&cfg, func(r *audit.Record) {
		if f.Match(r) {
			agg.add(r)
		}
	})
	if !ver.OK {
		agg = newAggregator(&cfg)
		err := audit.Query(ctx, cfg.Files, f, func(r *audit.Record) error {
			agg.add(r)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("report: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rep := agg.finish()
	rep.Version = FormatVersion
	rep.Generated = cfg.Now().UTC()
	rep.Files = cfg.Files
	rep.Selection = Selection{Sandbox: cfg.Sandbox, Since: cfg.Since, Until: cfg.Until, Mode: cfg.Mode, Owner: cfg.Owner, Labels: cfg.Labels}
	rep.Verification = ver
	return rep, nil
}

// verify runs audit.VerifyFiles, passing each record to each, and notes what
// it did not check.
func verify(cfg *Config, each func(r *audit.Record)) Verification {
	opts := audit.VerifyOptions{PublicKey: cfg.PublicKey, Partial: cfg.Partial, MaxUnsigned: cfg.MaxUnsigned, Each: each}
	if cfg.PublicKey == nil {
		opts.MaxUnsigned = -1
	}
	rep, err := audit.VerifyFiles(opts, cfg.Files...)
	v := Verification{
		OK: err == nil, Lines: rep.Lines, Records: rep.Records, Checkpoints: rep.Checkpoints,
		FirstSeq: rep.FirstSeq, LastSeq: rep.LastSeq, Head: rep.Head,
		SignaturesChecked: rep.SignaturesChecked, SignedThrough: rep.SignedThrough,
		Unsigned: rep.Unsigned, PrunedThrough: rep.PrunedThrough,
	}
	var ve *audit.VerifyError
	switch {
	case errors.As(err, &ve):
		v.Error = fmt.Sprintf("%v (%d lines before it verified; the figures below still count every readable record)", ve, rep.Lines)
	case err != nil:
		v.Error = err.Error()
	}
	if cfg.PublicKey == nil {
		v.NotChecked = append(v.NotChecked, "checkpoint signatures: no public key given (--pubkey), so a rewrite of the whole chain would not be caught")
	} else if rep.Unsigned > 0 {
		v.NotChecked = append(v.NotChecked, fmt.Sprintf("the last %d records are not covered by a signed checkpoint", rep.Unsigned))
	}
	if cfg.Partial {
		v.NotChecked = append(v.NotChecked, "the start of the chain: the first file was allowed to start mid-chain (--partial)")
	}
	v.NotChecked = append(v.NotChecked, "records cut from the end exactly after a checkpoint: compare the head and last seq with a copy kept elsewhere")
	return v
}
