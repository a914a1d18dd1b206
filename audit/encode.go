package audit

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// AppendJSON appends r as one compact JSON object to dst and returns the extended
// buffer. The bytes are identical to what encoding/json's Marshal produces for the
// same Record (field order, omitempty, HTML-safe escaping, invalid UTF-8 as
// \ufffd), with three deliberate differences that keep every line valid JSON:
// a non-finite DurationMS is written as if it were zero, an Extra value that is
// not valid JSON is written as a JSON string of its bytes, and an empty Extra
// value is written as null. AppendJSON does not redact; the Writer does that before
// encoding.
func AppendJSON(dst []byte, r *Record) []byte {
	dst = append(dst, `{"seq":`...)
	dst = strconv.AppendUint(dst, r.Seq, 10)
	dst = append(dst, `,"ts":"`...)
	dst = r.TS.AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","prev":`...)
	dst = appendString(dst, r.Prev)
	dst = append(dst, `,"id":`...)
	dst = appendString(dst, r.ID)
	dst = appendStrField(dst, `,"node":`, r.Node)
	return appendBody(dst, r)
}

// appendBody writes every field after "id" and the closing brace.
func appendBody(dst []byte, r *Record) []byte {
	if r.Sandbox != "" {
		dst = append(dst, `,"sandbox":`...)
		dst = appendString(dst, r.Sandbox)
	}
	dst = appendStrField(dst, `,"owner":`, r.Owner)
	if p := r.Pod; p != nil {
		dst = append(dst, `,"pod":{`...)
		n := len(dst)
		for _, f := range [...]struct{ key, v string }{
			{`"namespace":`, p.Namespace}, {`"name":`, p.Name}, {`"uid":`, p.UID}, {`"service_account":`, p.ServiceAccount},
		} {
			if f.v == "" {
				continue
			}
			if len(dst) > n {
				dst = append(dst, ',')
			}
			dst = append(dst, f.key...)
			dst = appendString(dst, f.v)
		}
		dst = append(dst, '}')
	}
	dst = append(dst, `,"kind":`...)
	dst = appendString(dst, r.Kind)
	dst = appendStrField(dst, `,"decision":`, r.Decision)
	dst = appendStrField(dst, `,"mode":`, r.Mode)
	if len(r.Reasons) > 0 {
		dst = append(dst, `,"reasons":[`...)
		for i := range r.Reasons {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"id":`...)
			dst = appendString(dst, r.Reasons[i].ID)
			dst = append(dst, `,"msg":`...)
			dst = appendString(dst, r.Reasons[i].Msg)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	dst = appendStrField(dst, `,"policy_rev":`, r.PolicyRev)
	dst = appendStrField(dst, `,"host":`, r.Host)
	dst = appendIntField(dst, `,"port":`, int64(r.Port))
	dst = appendStrField(dst, `,"ip":`, r.IP)
	dst = appendStrField(dst, `,"protocol":`, r.Protocol)
	dst = appendStrField(dst, `,"method":`, r.Method)
	dst = appendStrField(dst, `,"path":`, r.Path)
	dst = appendStrsField(dst, `,"query":`, r.Query)
	dst = appendIntField(dst, `,"status":`, int64(r.Status))
	dst = appendIntField(dst, `,"bytes_up":`, r.BytesUp)
	dst = appendIntField(dst, `,"bytes_down":`, r.BytesDown)
	dst = appendFloatField(dst, `,"duration_ms":`, r.DurationMS)
	if len(r.Secrets) > 0 {
		dst = append(dst, `,"secrets":[`...)
		for i := range r.Secrets {
			s := &r.Secrets[i]
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"id":`...)
			dst = appendString(dst, s.ID)
			dst = append(dst, `,"version":`...)
			dst = appendString(dst, s.Version)
			dst = append(dst, `,"fingerprint":`...)
			dst = appendString(dst, s.Fingerprint)
			dst = appendStrField(dst, `,"where":`, s.Where)
			dst = appendIntField(dst, `,"scrubbed":`, int64(s.Scrubbed))
			dst = appendStrField(dst, `,"reauth":`, s.Reauth)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	dst = appendStrField(dst, `,"qname":`, r.QName)
	dst = appendStrField(dst, `,"qtype":`, r.QType)
	dst = appendStrField(dst, `,"rcode":`, r.RCode)
	if len(r.Answers) > 0 {
		dst = append(dst, `,"answers":[`...)
		for i := range r.Answers {
			a := &r.Answers[i]
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"type":`...)
			dst = appendString(dst, a.Type)
			dst = append(dst, `,"data":`...)
			dst = appendString(dst, a.Data)
			dst = append(dst, `,"ttl":`...)
			dst = strconv.AppendUint(dst, uint64(a.TTL), 10)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	dst = appendStrField(dst, `,"upstream":`, r.Upstream)
	dst = appendStrsField(dst, `,"flags":`, r.Flags)
	dst = appendFindings(dst, r.Findings)
	dst = appendStrField(dst, `,"error":`, r.Error)
	if r.Exec != nil {
		dst = append(dst, `,"exec":`...)
		dst = appendExec(dst, r.Exec)
	}
	if c := r.Checkpoint; c != nil {
		dst = append(dst, `,"checkpoint":{"head":`...)
		dst = appendString(dst, c.Head)
		dst = append(dst, `,"upto_seq":`...)
		dst = strconv.AppendUint(dst, c.Seq, 10)
		dst = append(dst, `,"key_id":`...)
		dst = appendString(dst, c.KeyID)
		dst = append(dst, `,"signature":`...)
		dst = appendString(dst, c.Signature)
		dst = append(dst, '}')
	}
	if len(r.Extra) > 0 {
		dst = append(dst, `,"extra":`...)
		dst = appendExtra(dst, r.Extra)
	}
	return append(dst, '}')
}

func appendExec(dst []byte, e *Exec) []byte {
	dst = append(dst, `{"phase":`...)
	dst = appendString(dst, e.Phase)
	dst = appendStrsField(dst, `,"argv":`, e.Argv)
	if e.ExitCode != nil {
		dst = append(dst, `,"exit_code":`...)
		dst = strconv.AppendInt(dst, int64(*e.ExitCode), 10)
	}
	dst = appendStrField(dst, `,"signal":`, e.Signal)
	dst = appendBoolField(dst, `,"timed_out":true`, e.TimedOut)
	dst = appendBoolField(dst, `,"oom_killed":true`, e.OOMKilled)
	dst = appendBoolField(dst, `,"pids_limit_hit":true`, e.PidsLimit)
	dst = appendFloatField(dst, `,"wall_ms":`, e.WallMS)
	dst = appendFloatField(dst, `,"cpu_ms":`, e.CPUMS)
	dst = appendIntField(dst, `,"peak_memory":`, e.PeakMemory)
	dst = appendIntField(dst, `,"stdout_bytes":`, e.StdoutBytes)
	dst = appendIntField(dst, `,"stderr_bytes":`, e.StderrBytes)
	dst = appendBoolField(dst, `,"truncated":true`, e.Truncated)
	return append(dst, '}')
}

// appendExtra writes the map with sorted keys, each value compacted and
// HTML-escaped the way encoding/json writes a json.RawMessage.
func appendExtra(dst []byte, m map[string]json.RawMessage) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	var tmp bytes.Buffer
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, k)
		dst = append(dst, ':')
		dst = appendRaw(dst, m[k], &tmp)
	}
	return append(dst, '}')
}

func appendRaw(dst []byte, raw json.RawMessage, tmp *bytes.Buffer) []byte {
	if len(raw) == 0 {
		return append(dst, "null"...)
	}
	tmp.Reset()
	if err := json.Compact(tmp, raw); err != nil {
		return appendString(dst, string(raw))
	}
	var out bytes.Buffer
	json.HTMLEscape(&out, tmp.Bytes())
	return append(dst, out.Bytes()...)
}

func appendStrField(dst []byte, key, v string) []byte {
	if v == "" {
		return dst
	}
	dst = append(dst, key...)
	return appendString(dst, v)
}

func appendStrsField(dst []byte, key string, v []string) []byte {
	if len(v) == 0 {
		return dst
	}
	dst = append(dst, key...)
	dst = append(dst, '[')
	for i, s := range v {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, s)
	}
	return append(dst, ']')
}

func appendIntField(dst []byte, key string, v int64) []byte {
	if v == 0 {
		return dst
	}
	dst = append(dst, key...)
	return strconv.AppendInt(dst, v, 10)
}

func appendBoolField(dst []byte, keyAndTrue string, v bool) []byte {
	if !v {
		return dst
	}
	return append(dst, keyAndTrue...)
}

func appendFloatField(dst []byte, key string, f float64) []byte {
	if f == 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return dst
	}
	dst = append(dst, key...)
	return appendFloat(dst, f)
}

// appendFloat formats f as an ES6 number, the way encoding/json does.
func appendFloat(dst []byte, f float64) []byte {
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}

const hexDigits = "0123456789abcdef"

// appendString writes s as a JSON string: quotes and backslashes escaped, control
// characters as short or \u00XX escapes, <, > and & as \u003c/\u003e/\u0026,
// U+2028 and U+2029 escaped, and each invalid UTF-8 byte as \ufffd.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
