package export

import (
	"encoding/json"
	"strings"

	"github.com/airlock-dev/airlock/audit"
)

// OCSFVersion is the OCSF schema version the events follow.
const OCSFVersion = "1.3.0"

// OCSF class and category uids used (audit/DESIGN.md, "Audit export").
const (
	ocsfClassBase    = 0    // Base Event: records that are not network activity
	ocsfClassNetwork = 4001 // Network Activity
	ocsfClassHTTP    = 4002 // HTTP Activity
	ocsfClassDNS     = 4003 // DNS Activity
	ocsfCatNetwork   = 4    // Network Activity category
)

// ocsfEvent encodes e as one OCSF event (a JSON object, one line). Fields
// OCSF has no place for are under unmapped, with the record's line hash.
func ocsfEvent(e *Event, version string) []byte {
	ev := map[string]any{}
	meta := map[string]any{
		"version":  OCSFVersion,
		"product":  map[string]any{"name": "airlock", "vendor_name": "airlock", "version": version},
		"log_name": "airlock-audit",
		"profiles": []string{"security_control"},
	}
	ev["metadata"] = meta
	if e.Gap != nil {
		ev["class_uid"], ev["category_uid"], ev["activity_id"], ev["type_uid"] = ocsfClassBase, 0, 99, 99
		ev["severity_id"], ev["status_id"] = 5, 2 // Critical, Failure
		ev["message"] = "audit export gap: " + e.Gap.Reason
		ev["unmapped"] = map[string]any{"kind": GapKind, keyGapFrom: e.Gap.From, keyGapUntil: e.Gap.Through}
		b, _ := json.Marshal(ev)
		return b
	}
	r := &e.Record
	meta["uid"] = r.ID
	meta["sequence"] = r.Seq
	class, activity := ocsfClass(r)
	ev["class_uid"], ev["activity_id"] = class, activity
	ev["category_uid"] = ocsfCatNetwork
	if class == ocsfClassBase {
		ev["category_uid"] = 0
	}
	ev["type_uid"] = class*100 + activity
	ev["time"] = r.TS.UnixMilli()
	ocsfDecision(ev, r, levelOf(e))
	if r.Node != "" {
		// The machine that logged the event (OCSF's reporting device).
		ev["device"] = map[string]any{"hostname": r.Node, "name": r.Node, "type_id": 0}
	}
	if r.Sandbox != "" || r.Owner != "" {
		src := map[string]any{"uid": r.Sandbox, "name": r.Sandbox}
		if r.Owner != "" {
			src["owner"] = map[string]any{"uid": r.Owner}
		}
		ev["src_endpoint"] = src
	}
	if r.Host != "" || r.IP != "" || r.Port != 0 {
		ev["dst_endpoint"] = omitZero(map[string]any{"hostname": r.Host, "ip": r.IP, "port": r.Port})
	}
	switch class {
	case ocsfClassHTTP:
		ev["http_request"] = map[string]any{"http_method": r.Method,
			"url": omitZero(map[string]any{"hostname": r.Host, "path": r.Path, "port": r.Port})}
		if r.Status != 0 {
			ev["http_response"] = map[string]any{"code": r.Status}
		}
	case ocsfClassDNS:
		ev["query"] = omitZero(map[string]any{"hostname": r.QName, "type": r.QType})
		if r.RCode != "" {
			ev["rcode"] = r.RCode
		}
		var answers []map[string]any
		for _, a := range r.Answers {
			answers = append(answers, map[string]any{"type": a.Type, "rdata": a.Data, "ttl": a.TTL})
		}
		if answers != nil {
			ev["answers"] = answers
		}
	}
	if r.BytesUp != 0 || r.BytesDown != 0 {
		ev["traffic"] = map[string]any{"bytes_out": r.BytesUp, "bytes_in": r.BytesDown}
	}
	if r.DurationMS != 0 {
		ev["duration"] = int64(r.DurationMS)
	}
	ev["unmapped"] = ocsfUnmapped(e)
	b, _ := json.Marshal(ev)
	return b
}

// ocsfClass picks the class and activity of a record.
func ocsfClass(r *audit.Record) (class, activity int) {
	switch r.Kind {
	case audit.KindHTTP:
		return ocsfClassHTTP, httpActivity(r.Method)
	case audit.KindConnect:
		return ocsfClassHTTP, 1 // Connect
	case audit.KindDNS:
		return ocsfClassDNS, 1 // Query
	case audit.KindTLS, audit.KindTCP:
		switch r.Decision {
		case audit.DecisionDeny:
			return ocsfClassNetwork, 5 // Refuse
		case audit.DecisionError:
			return ocsfClassNetwork, 4 // Fail
		}
		return ocsfClassNetwork, 1 // Open
	case audit.KindClose:
		return ocsfClassNetwork, 2 // Close
	case audit.KindDrop:
		return ocsfClassNetwork, 5 // Refuse
	}
	return ocsfClassBase, 99 // Other
}

// httpActivity is HTTP Activity's activity_id for a method (99 Other).
func httpActivity(method string) int {
	switch strings.ToUpper(method) {
	case "CONNECT":
		return 1
	case "DELETE":
		return 2
	case "GET":
		return 3
	case "HEAD":
		return 4
	case "OPTIONS":
		return 5
	case "POST":
		return 6
	case "PUT":
		return 7
	case "TRACE":
		return 8
	}
	return 99
}

// ocsfDecision sets severity, status, action, disposition and the policy
// (firewall_rule) from the record's decision, mode, reasons and revision.
// A deny in report mode was let through: action Allowed, disposition
// Detected.
func ocsfDecision(ev map[string]any, r *audit.Record, lv level) {
	ev["severity_id"] = map[level]int{levelInfo: 1, levelWarn: 3, levelError: 4, levelCritical: 5}[lv]
	switch r.Decision {
	case "":
		return
	case audit.DecisionAllow:
		ev["status_id"], ev["status"] = 1, "Success"
		ev["action_id"], ev["action"] = 1, "Allowed"
		ev["disposition_id"], ev["disposition"] = 1, "Allowed"
	default:
		ev["status_id"], ev["status"] = 2, "Failure"
		ev["action_id"], ev["action"] = 2, "Denied"
		ev["disposition_id"], ev["disposition"] = 2, "Blocked"
		if r.Mode == "report" {
			ev["action_id"], ev["action"] = 1, "Allowed"
			ev["disposition_id"], ev["disposition"] = 15, "Detected"
		}
	}
	ids := reasonIDs(r.Reasons)
	var msgs []string
	for _, x := range r.Reasons {
		msgs = append(msgs, x.Msg)
	}
	if len(ids) > 0 {
		ev["status_detail"] = strings.Join(ids, ",")
		ev["message"] = strings.Join(msgs, "; ")
	}
	if len(ids) > 0 || r.PolicyRev != "" {
		ev["firewall_rule"] = omitZero(map[string]any{"uid": strings.Join(ids, ","), "name": "airlock policy", "version": r.PolicyRev, "desc": strings.Join(msgs, "; ")})
	}
}

// ocsfUnmapped keeps what the classes have no field for, and the chain
// fields (seq, prev, hash) that prove the event's place in the log.
func ocsfUnmapped(e *Event) map[string]any {
	r := &e.Record
	u := map[string]any{keySeq: r.Seq, keyPrev: r.Prev, keyHash: e.Hash, "kind": r.Kind, "decision": r.Decision,
		"mode": r.Mode, "node": r.Node, "sandbox": r.Sandbox, "owner": r.Owner, "policy_rev": r.PolicyRev, "protocol": r.Protocol, "error": r.Error}
	u = omitZero(u)
	if len(r.Reasons) > 0 {
		u["reasons"] = r.Reasons
	}
	if len(r.Query) > 0 {
		u["query_keys"] = r.Query
	}
	if len(r.Flags) > 0 {
		u["flags"] = r.Flags
	}
	if len(r.Secrets) > 0 {
		u["secrets"] = r.Secrets // ids, versions and keyed fingerprints: never values
	}
	if r.Exec != nil {
		u["exec"] = r.Exec
	}
	if r.Pod != nil {
		u["pod"] = r.Pod // the Kubernetes pod of a sandbox airlock-cni attached
	}
	if r.Checkpoint != nil {
		u["checkpoint"] = r.Checkpoint
	}
	if len(r.Extra) > 0 {
		u["extra"] = r.Extra
	}
	return u
}

// omitZero drops the zero strings and ints of m.
func omitZero(m map[string]any) map[string]any {
	for k, v := range m {
		if v == "" || v == 0 {
			delete(m, k)
		}
	}
	return m
}
