package learn

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/termtext"
)

// FileHTTPAllow is the file Write puts the http_allow table in.
const FileHTTPAllow = "http_allow.rego"

// tableSafePath: a learned path the http_allow table can carry as a glob with
// the same meaning: no glob metacharacter but a trailing "*" (a prefix), and
// nothing the table refuses anyway (dot or empty segments, encoded "/", "."
// or "\\").
var (
	globMeta     = regexp.MustCompile(`[?\[\]{}\\]`)
	tableRefuses = regexp.MustCompile(`(^|/)\.\.?(/|$)|//|%2[eEfF]|%5[cC]`)
)

func tableSafePath(p string) bool {
	body := strings.TrimSuffix(p, "*")
	return strings.HasPrefix(p, "/") && !strings.Contains(body, "*") && !globMeta.MatchString(p) && !tableRefuses.MatchString(p)
}

// tableEntry reports whether e says exactly what an http_allow entry derives
// (its DNS name, CONNECT/TLS on 443 or 80 only, HTTP methods on 443 or 80
// with table-safe paths) and returns the table's rows for it.
func tableEntry(e *Entry) ([]map[string]any, bool) {
	if len(e.HTTP) == 0 || !e.DNS {
		return nil, false
	}
	onDefault := func(ps []int) bool {
		for _, p := range ps {
			if p != 443 && p != 80 {
				return false
			}
		}
		return true
	}
	for kind, ps := range e.Ports {
		if (kind != "connect" && kind != "tls") || !onDefault(ps) {
			return nil, false
		}
	}
	methods := make([]string, 0, len(e.HTTP))
	for m, r := range e.HTTP {
		if !onDefault(r.Ports) {
			return nil, false
		}
		for _, p := range r.Paths {
			if !tableSafePath(p) {
				return nil, false
			}
		}
		methods = append(methods, m)
	}
	sort.Strings(methods)
	rows := make([]map[string]any, 0, len(methods))
	for _, m := range methods {
		rows = append(rows, map[string]any{"methods": []string{m}, "paths": e.HTTP[m].Paths})
	}
	return rows, true
}

// splitTable returns the entries written as an http_allow table (the policy
// library's helper: DNS, CONNECT/TLS on 443 and 80, interception and only
// the listed requests) and the rest, which stay data.suggested.hosts.
func splitTable(hosts map[string]*Entry) (table map[string][]map[string]any, rest map[string]*Entry) {
	table, rest = map[string][]map[string]any{}, map[string]*Entry{}
	for k, e := range hosts {
		if rows, ok := tableEntry(e); ok {
			table[k] = rows
			continue
		}
		rest[k] = e
	}
	return table, rest
}

// tableRego is the http_allow.rego Write writes for table.
func tableRego(table map[string][]map[string]any) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# Written by airlock policy suggest: the HTTP requests the log shows, by host,\n")
	b.WriteString("# method and path (\"*\" at the end of a path is a prefix). The library derives\n")
	b.WriteString("# each host's DNS, CONNECT/TLS on 443 and 80 and interception from this table,\n")
	b.WriteString("# and lets through only the requests an entry matches.\n")
	b.WriteString("package airlock.egress\n\nhttp_allow := {\n")
	keys := make([]string, 0, len(table))
	for k := range table {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		kj, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		rows, err := json.Marshal(table[k])
		if err != nil {
			return nil, err
		}
		// Reviewed by people: what a terminal would act on is written as
		// \u escapes (the same values).
		fmt.Fprintf(&b, "\t%s: %s,\n", termtext.EscapeJSON(kj), termtext.EscapeJSON(rows))
	}
	b.WriteString("}\n")
	return b.Bytes(), nil
}

// writeExtras writes the http_allow table (when any entry fits it) and the
// manifest naming the presets the suggestion leaves hosts to (none when it
// leaves none), so the directory means "this and nothing else".
func writeExtras(dir string, s *Suggestion, table map[string][]map[string]any) error {
	if len(table) > 0 {
		src, err := tableRego(table)
		if err != nil {
			return err
		}
		if err := writeFile(dir, FileHTTPAllow, src); err != nil {
			return err
		}
	}
	names := make([]string, 0, len(s.Presets))
	for p := range s.Presets {
		names = append(names, p)
	}
	sort.Strings(names)
	if len(names) == 0 {
		names = []string{"none"}
	}
	m := "# Written by airlock policy suggest: the presets the log's hosts needed.\n" +
		"presets: [" + strings.Join(names, ", ") + "]\n"
	return writeFile(dir, policy.ManifestFile, []byte(m))
}
