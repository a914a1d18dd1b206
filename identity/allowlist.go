package identity

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
)

// AllowList is one sandbox's own allow entries (Sandbox.Allow): hosts
// reachable from that sandbox alone, with the meaning of policy's
// Config.AllowHosts (--allow). Policy sees it as input.sandbox.allow, an object keyed like
// data.airlock.hosts.allow (values true or {"ports": [...]}), so the library
// looks a destination up by key and a decision costs the same with 1 or
// 10,000 entries. An AllowList is immutable: the digest the decision cache
// keys on is built once, by NewAllowList, and policy's own form of the list
// once per list (Compiled). A nil *AllowList is an empty list.
type AllowList struct {
	entries []string // normalized, sorted, without duplicates
	obj     map[string]any
	digest  [sha256.Size]byte // of the object policy sees, for the cache key
	memo    *allowMemo        // shared by copies of the list
}

type allowMemo struct {
	once sync.Once
	v    any
}

// Digest is the SHA-256 of the list as policy sees it (keys and ports
// sorted): equal meaning, equal digest.
func (a *AllowList) Digest() [sha256.Size]byte { return a.digest }

// Compiled returns build(the object policy sees) the first time it is called
// on the list and the same value after: the consumer's own form of the list
// (policy's OPA value), built once however many decisions read it.
func (a *AllowList) Compiled(build func(obj map[string]any) any) any {
	if a.memo == nil { // a zero AllowList, not made by NewAllowList
		return build(a.obj)
	}
	a.memo.once.Do(func() { a.memo.v = build(a.obj) })
	return a.memo.v
}

// NewAllowList parses entries with the spellings and the parser of
// Config.AllowHosts: "host" (ports 443 and 80), "host:port", "host:*" (every
// port but 53 and 853), "*.x" (one label under x), "**.x" (any depth), an IP,
// "[IPv6]:port". A DNS port (53, 853) is reachable only when an entry names
// it. The error names the first bad entry. No entries give a nil list.
func NewAllowList(entries []string) (*AllowList, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	norm := make([]string, 0, len(entries))
	for i, e := range entries {
		n, err := NormalizeAllow(e)
		if err != nil {
			return nil, fmt.Errorf("policy: allow[%d] %q: %w", i, e, err)
		}
		norm = append(norm, n)
	}
	slices.Sort(norm)
	norm = slices.Compact(norm)
	obj, err := AllowEntries(norm)
	if err != nil {
		return nil, err // cannot happen: every entry was just normalized
	}
	canon, err := json.Marshal(obj) // keys sorted, ports sorted: equal meaning, equal bytes
	if err != nil {
		return nil, fmt.Errorf("policy: allow: %w", err)
	}
	return &AllowList{entries: norm, obj: obj, digest: sha256.Sum256(canon), memo: new(allowMemo)}, nil
}

// Entries returns the normalized entries, sorted, without duplicates
// ("PyPI.org" is "pypi.org"; "host:443" and "host" stay two entries).
func (a *AllowList) Entries() []string {
	if a == nil {
		return nil
	}
	return slices.Clone(a.entries)
}

// Len is the number of distinct entries.
func (a *AllowList) Len() int {
	if a == nil {
		return 0
	}
	return len(a.entries)
}

// MarshalJSON writes the list as policy sees it: an object keyed by host
// pattern, each value true (ports 443 and 80) or {"ports": [...]}.
func (a *AllowList) MarshalJSON() ([]byte, error) {
	if a == nil {
		return []byte("null"), nil
	}
	return json.Marshal(a.obj)
}

// UnmarshalJSON reads either form: what MarshalJSON writes (an object keyed by
// host pattern, values true or {"ports": [PORT or "*", ...]}), or an array of
// entries as NewAllowList takes them. Either way the entries go through
// NewAllowList; an empty object or array is an empty list.
func (a *AllowList) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	var entries []string
	switch {
	case len(b) > 0 && b[0] == '[':
		if err := json.Unmarshal(b, &entries); err != nil {
			return fmt.Errorf("policy: allow: want an array of strings such as [\"pypi.org\", \"git.corp.example:22\"]: %w", err)
		}
	case len(b) > 0 && b[0] == '{':
		var err error
		if entries, err = objectEntries(b); err != nil {
			return err
		}
	default:
		return errors.New("policy: allow: want an object keyed by host (values true or {\"ports\": [...]}) or an array of entries")
	}
	l, err := NewAllowList(entries)
	if err != nil {
		return err
	}
	if l == nil { // an empty object or array: present, and empty
		l = &AllowList{obj: map[string]any{}, digest: sha256.Sum256([]byte("{}")), memo: new(allowMemo)}
	}
	*a = *l
	return nil
}

// objectEntries turns the object form back into entries: true is "host",
// {"ports": [443, "*"]} is "host:443" and "host:*".
func objectEntries(b []byte) ([]string, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return nil, fmt.Errorf("policy: allow: %w", err)
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var entries []string
	for _, host := range keys {
		raw := bytes.TrimSpace(obj[host])
		if string(raw) == "true" {
			entries = append(entries, host)
			continue
		}
		var v struct {
			Ports []json.RawMessage `json:"ports"`
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil || len(v.Ports) == 0 {
			return nil, fmt.Errorf("policy: allow: %q: value must be true or {\"ports\": [443, \"*\", ...]}", host)
		}
		for _, p := range v.Ports {
			var port string
			if json.Unmarshal(p, &port) != nil {
				port = string(bytes.TrimSpace(p)) // a number
			}
			if strings.IndexByte(host, ':') >= 0 && !strings.HasPrefix(host, "[") {
				entries = append(entries, "["+host+"]:"+port)
			} else {
				entries = append(entries, host+":"+port)
			}
		}
	}
	return entries, nil
}
