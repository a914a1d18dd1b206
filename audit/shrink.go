package audit

import (
	"encoding/json"
	"strconv"
)

// MaxRecordSize bounds one encoded caller record. A larger one is written
// shrunk (see shrink), far below MaxLineSize, the readers' limit.
const MaxRecordSize = 1 << 20

// Bounds shrink applies to an oversized record.
const (
	shrinkString = 4096 // bytes kept of each string field
	shrinkList   = 64   // entries kept of each list
)

// TruncatedKey is the Extra key of a record the writer shrank; its value is the
// encoded size of the original.
const TruncatedKey = "airlock_truncated_bytes"

// shrink returns a copy of r whose strings and lists are cut to the shrink
// bounds, with Extra replaced by {TruncatedKey: size}. Everything a query
// filters on (sandbox, owner, kind, decision, host) is kept as far as the
// bounds allow.
func shrink(r *Record, size int) *Record {
	c := *r
	cut := func(s string) string {
		if len(s) > shrinkString {
			return s[:shrinkString]
		}
		return s
	}
	cutList := func(ss []string) []string {
		if len(ss) > shrinkList {
			ss = ss[:shrinkList]
		}
		out := make([]string, len(ss))
		for i, s := range ss {
			out[i] = cut(s)
		}
		return out
	}
	for _, p := range []*string{&c.ID, &c.Sandbox, &c.Owner, &c.Kind, &c.Decision, &c.Mode, &c.PolicyRev, &c.Host, &c.IP,
		&c.Protocol, &c.Method, &c.Path, &c.QName, &c.QType, &c.RCode, &c.Upstream, &c.Error} {
		*p = cut(*p)
	}
	if c.Pod != nil {
		c.Pod = &Pod{Namespace: cut(c.Pod.Namespace), Name: cut(c.Pod.Name), UID: cut(c.Pod.UID), ServiceAccount: cut(c.Pod.ServiceAccount)}
	}
	if c.Query != nil {
		c.Query = cutList(c.Query)
	}
	if c.Flags != nil {
		c.Flags = cutList(c.Flags)
	}
	if len(c.Reasons) > 0 {
		rs := c.Reasons[:min(len(c.Reasons), shrinkList)]
		c.Reasons = make([]Reason, len(rs))
		for i, x := range rs {
			c.Reasons[i] = Reason{ID: cut(x.ID), Msg: cut(x.Msg)}
		}
	}
	if len(c.Secrets) > 0 {
		ss := c.Secrets[:min(len(c.Secrets), shrinkList)]
		c.Secrets = make([]Secret, len(ss))
		for i, x := range ss {
			c.Secrets[i] = Secret{ID: cut(x.ID), Version: cut(x.Version), Fingerprint: cut(x.Fingerprint), Where: cut(x.Where), Scrubbed: x.Scrubbed, Reauth: cut(x.Reauth)}
		}
	}
	if len(c.Findings) > 0 {
		c.Findings = shrinkFindings(c.Findings, shrinkList, cut)
	}
	if len(c.Answers) > 0 {
		as := c.Answers[:min(len(c.Answers), shrinkList)]
		c.Answers = make([]Answer, len(as))
		for i, x := range as {
			c.Answers[i] = Answer{Type: cut(x.Type), Data: cut(x.Data), TTL: x.TTL}
		}
	}
	if c.Exec != nil {
		e := *c.Exec
		e.Phase, e.Signal = cut(e.Phase), cut(e.Signal)
		if e.Argv != nil {
			e.Argv = cutList(e.Argv)
		}
		c.Exec = &e
	}
	c.Extra = map[string]json.RawMessage{TruncatedKey: json.RawMessage(strconv.Itoa(size))}
	return &c
}
