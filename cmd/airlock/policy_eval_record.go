//go:build !airlock_front

package main

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/learn"
)

// isAuditRecord reports whether src starts with an audit record (a line of
// the log) rather than a policy input: records carry seq and prev, inputs
// never do.
func isAuditRecord(src []byte) bool {
	var keys map[string]json.RawMessage
	if json.NewDecoder(bytes.NewReader(src)).Decode(&keys) != nil {
		return false
	}
	_, seq := keys["seq"]
	_, prev := keys["prev"]
	return seq && prev
}

// recordInput is the policy input audit record src stands for, rebuilt as
// `policy replay` rebuilds it (learn.Rebuilder): what the record does not
// keep (header and query values, a daemon sandbox's labels, mode and allow
// list, which only its creation record has) is absent.
func recordInput(src []byte) (*policy.Input, error) {
	dec := json.NewDecoder(bytes.NewReader(src))
	var r audit.Record
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("--input: audit record: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("--input: more than one audit record: give one line of the log (e.g. sed -n 12p audit.jsonl)")
	}
	in, skip := learn.NewRebuilder().Input(&r)
	if skip != "" {
		return nil, fmt.Errorf("--input: audit record seq %d (kind %s) stands for no policy input: %s", r.Seq, r.Kind, skip)
	}
	return &in, nil
}
