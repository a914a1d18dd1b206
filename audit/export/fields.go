package export

import (
	"github.com/airlock-dev/airlock/audit"
)

// field is one flat airlock attribute of an exported event (OTLP attribute,
// syslog SD-PARAM). Value is a string, int64, float64 or []string.
type field struct {
	Key   string
	Value any
}

// Attribute names (OTLP attributes carry them under "airlock.", syslog
// structured data as they are).
const (
	keySeq      = "seq"
	keyPrev     = "prev"
	keyHash     = "hash"
	keyGapFrom  = "gap_from_seq"
	keyGapUntil = "gap_through_seq"
)

// fields lists e's airlock fields: seq, prev and hash always, then every
// field of the record that is set. Secret values are never in a record; the
// secrets used are named by id only.
func fields(e *Event) []field {
	if e.Gap != nil {
		return []field{{keyGapFrom, int64(e.Gap.From)}, {keyGapUntil, int64(e.Gap.Through)}, {"kind", GapKind}, {"reason", e.Gap.Reason}}
	}
	r := &e.Record
	out := []field{{keySeq, int64(r.Seq)}, {keyPrev, r.Prev}, {keyHash, e.Hash}, {"kind", r.Kind}}
	str := func(k, v string) {
		if v != "" {
			out = append(out, field{k, v})
		}
	}
	num := func(k string, v int64) {
		if v != 0 {
			out = append(out, field{k, v})
		}
	}
	list := func(k string, v []string) {
		if len(v) > 0 {
			out = append(out, field{k, v})
		}
	}
	str("id", r.ID)
	str("node", r.Node)
	str("decision", r.Decision)
	str("mode", r.Mode)
	list("reasons", reasonIDs(r.Reasons))
	str("sandbox", r.Sandbox)
	str("owner", r.Owner)
	if p := r.Pod; p != nil {
		str("pod.namespace", p.Namespace)
		str("pod.name", p.Name)
		str("pod.uid", p.UID)
		str("pod.service_account", p.ServiceAccount)
	}
	str("policy_rev", r.PolicyRev)
	str("host", r.Host)
	num("port", int64(r.Port))
	str("ip", r.IP)
	str("protocol", r.Protocol)
	str("method", r.Method)
	str("path", r.Path)
	num("status", int64(r.Status))
	num("bytes_up", r.BytesUp)
	num("bytes_down", r.BytesDown)
	if r.DurationMS != 0 {
		out = append(out, field{"duration_ms", r.DurationMS})
	}
	str("qname", r.QName)
	str("qtype", r.QType)
	str("rcode", r.RCode)
	list("flags", r.Flags)
	list("secrets", secretIDs(r.Secrets))
	str("error", r.Error)
	return out
}

func reasonIDs(rs []audit.Reason) []string {
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.ID)
	}
	return ids
}

func secretIDs(ss []audit.Secret) []string {
	var ids []string
	for _, s := range ss {
		ids = append(ids, s.ID)
	}
	return ids
}

// Severity levels of an event, by decision (syslog and OTLP map them to
// their own numbers).
type level int

const (
	levelInfo level = iota
	levelWarn
	levelError
	levelCritical
)

// levelOf: allow is informational, deny a warning, error an error, a gap
// (records lost to the export) critical; the log's own outage and crash
// records are warnings.
func levelOf(e *Event) level {
	if e.Gap != nil {
		return levelCritical
	}
	switch e.Record.Decision {
	case audit.DecisionDeny:
		return levelWarn
	case audit.DecisionError:
		return levelError
	}
	switch e.Record.Kind {
	case audit.KindOutage, audit.KindCrashRecovered:
		return levelWarn
	}
	return levelInfo
}
