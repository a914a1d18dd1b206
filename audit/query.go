package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Filter selects records in Query. Zero fields match everything.
type Filter struct {
	Sandbox string
	// Owner matches Record.Owner, the decimal uid of the sandbox's owner.
	Owner string
	// Node matches Record.Node, the machine whose writer wrote it.
	Node     string
	Kind     string // checkpoints are skipped unless Kind is "checkpoint"
	Decision string
	// Mode matches the policy mode a decision was made in: ModeReport
	// matches records with mode report, ModeEnforce every other record with
	// a decision (mode enforce, or none: the DNS filter and the namespace's
	// drops always enforce).
	Mode string
	// Reason matches a record with this reason id among its reasons.
	Reason string
	// Labels matches the records of sandboxes carrying every one of these
	// labels, as their creation record (kind sandbox, extra labels) gives
	// them. That record precedes the sandbox's others, so Match learns the
	// labels as it is shown records in log order (Query does): a sandbox
	// whose creation record it has not seen matches no label.
	Labels map[string]string

	labelled map[string]bool // sandboxes whose creation record had Labels, learnt by Match
	// Host matches Record.Host (or, when that is empty, QName without its
	// trailing dot) exactly; a leading "." or "*." matches the name and every
	// name under it: ".pypi.org" matches pypi.org and files.pypi.org.
	Host string
	// Findings matches records with a content-inspection finding: "any", a
	// class (credential, canary, ...) or a detector name (finding.go).
	Findings string
	Since    time.Time // TS at or after
	Until    time.Time // TS before
}

// Match reports whether r passes f.
func (f *Filter) Match(r *Record) bool {
	if len(f.Labels) > 0 {
		f.learnLabels(r)
	}
	if r.Kind == KindCheckpoint && f.Kind != KindCheckpoint {
		return false
	}
	if f.Sandbox != "" && r.Sandbox != f.Sandbox ||
		f.Owner != "" && r.Owner != f.Owner ||
		f.Node != "" && r.Node != f.Node ||
		f.Kind != "" && r.Kind != f.Kind ||
		f.Decision != "" && r.Decision != f.Decision ||
		!f.Since.IsZero() && r.TS.Before(f.Since) ||
		!f.Until.IsZero() && !r.TS.Before(f.Until) ||
		!f.matchMode(r) || !f.matchReason(r) || !f.matchLabels(r) || !f.matchFindings(r) {
		return false
	}
	if f.Host == "" {
		return true
	}
	host := r.Host
	if host == "" {
		host = strings.TrimSuffix(r.QName, ".")
	}
	host = strings.ToLower(host)
	want := strings.ToLower(strings.TrimSuffix(f.Host, "."))
	if suffix, ok := strings.CutPrefix(want, "*."); ok {
		return host == suffix || strings.HasSuffix(host, "."+suffix)
	}
	if suffix, ok := strings.CutPrefix(want, "."); ok {
		return host == suffix || strings.HasSuffix(host, "."+suffix)
	}
	return host == want
}

// Policy modes as records spell them (Record.Mode; policy.Mode's values).
const (
	ModeEnforce = "enforce"
	ModeReport  = modeReport
)

// WouldDeny reports whether r is a report-mode denial: policy would have
// refused it, but report mode let it through (audit/DESIGN.md). Such a record says decision deny and mode report; it must be shown
// and counted apart from a denial that was enforced.
func WouldDeny(r *Record) bool {
	return r.Decision == DecisionDeny && r.Mode == modeReport
}

// Outcome is how a decision is shown and counted: the record's decision, or
// OutcomeWouldDeny for a report-mode denial (WouldDeny).
func Outcome(r *Record) string {
	if WouldDeny(r) {
		return OutcomeWouldDeny
	}
	return r.Decision
}

// OutcomeWouldDeny is Outcome's name for a request report mode let through
// that enforce mode would have refused.
const OutcomeWouldDeny = "would_deny"

func (f *Filter) matchMode(r *Record) bool {
	switch f.Mode {
	case "":
		return true
	case modeReport:
		return r.Mode == modeReport
	}
	return r.Decision != "" && r.Mode != modeReport && (f.Mode == ModeEnforce || r.Mode == f.Mode)
}

func (f *Filter) matchReason(r *Record) bool {
	if f.Reason == "" {
		return true
	}
	for _, x := range r.Reasons {
		if x.ID == f.Reason {
			return true
		}
	}
	return false
}

// learnLabels remembers the labels of a sandbox's creation record.
func (f *Filter) learnLabels(r *Record) {
	if r.Kind != KindSandbox || r.Sandbox == "" {
		return
	}
	raw, ok := r.Extra["labels"]
	if !ok {
		return // an end record
	}
	var labels map[string]string
	_ = json.Unmarshal(raw, &labels)
	if f.labelled == nil {
		f.labelled = map[string]bool{}
	}
	delete(f.labelled, r.Sandbox) // an id used again is a new sandbox
	for k, v := range f.Labels {
		if got, ok := labels[k]; !ok || got != v {
			return
		}
	}
	f.labelled[r.Sandbox] = true
}

func (f *Filter) matchLabels(r *Record) bool {
	if len(f.Labels) == 0 {
		return true
	}
	return f.labelled[r.Sandbox]
}

// Query streams the records of files, in order, that pass f to fn, one at a
// time; fn must not keep r. A line that is not valid JSON is an error naming
// it; a torn last line is skipped (the writer cuts it at its next start).
// Returning a non-nil error from fn stops the scan and is returned.
func Query(ctx context.Context, files []string, f Filter, fn func(r *Record) error) error {
	if len(f.Labels) > 0 && f.labelled == nil {
		f.labelled = map[string]bool{} // shared by every file's copy
	}
	for _, path := range files {
		if err := queryFile(ctx, path, &f, fn); err != nil {
			return err
		}
	}
	return nil
}

func queryFile(ctx context.Context, path string, f *Filter, fn func(r *Record) error) error {
	fh, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	defer fh.Close()
	return QueryReader(ctx, path, fh, *f, fn)
}

// QueryReader is Query over one reader; name is used in errors.
func QueryReader(ctx context.Context, name string, rd io.Reader, f Filter, fn func(r *Record) error) error {
	if len(f.Labels) > 0 && f.labelled == nil {
		f.labelled = map[string]bool{}
	}
	lr := newLineReader(rd)
	for n := 1; ; n++ {
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		line, complete, err := lr.next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("audit: %s:%d: %w", name, n, err)
		}
		if !complete {
			return nil
		}
		var r Record
		if err := json.Unmarshal(line, &r); err != nil {
			return fmt.Errorf("audit: %s:%d: %s: %w", name, n, ReasonBadJSON, err)
		}
		if !f.Match(&r) {
			continue
		}
		if err := fn(&r); err != nil {
			return err
		}
	}
}
