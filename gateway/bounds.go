package gateway

import (
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bounds on what a request puts in its audit record, so that a hostile
// request cannot make records huge (the request line alone may be
// MaxHeaderBytes long).
const (
	maxRecordQueryKeys = 64   // distinct query keys listed
	maxRecordKeyBytes  = 64   // bytes of one query key
	maxRecordPathBytes = 2048 // bytes of the path
	maxRecordTextBytes = 512  // bytes of a method, reason message or error
)

// queryKeys returns the distinct keys of a raw query, never its values: at
// most maxRecordQueryKeys of them, each cut at maxRecordKeyBytes, then one
// element "(+N more parameters)" (never a key: a raw query has no space)
// counting the parameters whose keys are not listed. Linear in the query's
// length.
func queryKeys(q string) []string {
	const scan = 8 // up to this many keys a scan beats a map
	var keys []string
	var seen map[string]struct{}
	more := 0
	for q != "" {
		var kv string
		kv, q, _ = strings.Cut(q, "&")
		k, _, _ := strings.Cut(kv, "=")
		if k == "" {
			continue
		}
		k = clip(k, maxRecordKeyBytes)
		if seen != nil {
			if _, dup := seen[k]; dup {
				continue
			}
		} else if slices.Contains(keys, k) {
			continue
		}
		if len(keys) == maxRecordQueryKeys {
			more++
			continue
		}
		keys = append(keys, k)
		if seen != nil {
			seen[k] = struct{}{}
		} else if len(keys) > scan {
			seen = make(map[string]struct{}, maxRecordQueryKeys)
			for _, x := range keys {
				seen[x] = struct{}{}
			}
		}
	}
	if more > 0 {
		keys = append(keys, "(+"+strconv.Itoa(more)+" more parameters)")
	}
	return keys
}

// queryParams counts the parameters of a raw query ('&'-separated, empty
// ones not counted), stopping once past max.
func queryParams(q string, max int) int {
	n := 0
	for q != "" && n <= max {
		var kv string
		kv, q, _ = strings.Cut(q, "&")
		if kv != "" {
			n++
		}
	}
	return n
}

// clip cuts s to at most n bytes (on a UTF-8 boundary when s is valid there)
// and says how much was cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > n-utf8.UTFMax && cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "...[cut " + strconv.Itoa(len(s)-cut) + " bytes]"
}
