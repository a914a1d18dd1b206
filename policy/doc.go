// Package policy decides every egress request with an embedded OPA/Rego engine
// (Rego v1 only, github.com/open-policy-agent/opa/v1).
//
// It owns the policy input and decision documents (input.go), the engine behind
// the Decider seam (a compiled, prepared query plus its data in an immutable
// snapshot behind an atomic pointer, swapped by Reload), the decision cache
// (cache.go, bounded by count and bytes), the host entries of presets and
// --allow (hosts.go: ports, git), and
// the shared logic of `airlock policy test|check|eval` (RunTests, Check,
// ParseInput). The Rego library, default policy, presets and input schema live in
// the top-level policies/ directory and are embedded through package policies.
//
// A policy directory (Config.Dir) is one unit: its *.rego files, its data.json /
// data.yaml files (merged into data at the path of their directory, OPA's
// convention), presets/NAME.json (preset NAME: an object keyed by host pattern,
// each value true or {"ports": [...], "git": bool}; hosts.go) and
// schema/input.json. A file at the same relative path as an
// embedded one replaces it, so the policies/ source tree itself can be loaded. A
// subdirectory named examples/ is never part of the unit; RunTests and Check
// treat each examples/NAME/ as a unit of its own.
//
// Fail closed: an evaluation error, an undefined or malformed decision or a
// deadline is a deny with reason policy_error, in every mode.
//
// policy must never import gateway, dnsfilter, secrets, audit, netns or sandboxd:
// they call it, not the other way round.
package policy
