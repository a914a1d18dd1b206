// Package policy decides every egress request with an embedded OPA/Rego engine
// (Rego v1 only, github.com/open-policy-agent/opa/v1). It owns the input and
// decision documents (input.go), the engine behind the Decider seam (an
// immutable compiled snapshot behind an atomic pointer, swapped by Reload),
// the decision cache (cache.go), preset and --allow host entries (hosts.go),
// bundles (bundle*.go: verified, compiled and tested before the swap, the last
// good one persisted), `airlock policy test|check|eval|explain` (RunTests,
// Check, ParseInput, Explain, DiffExplain), and a directory's manifest
// (manifest.go: airlock-policy.yaml names the presets it builds on, for tests
// and run time alike). policies/ holds the embedded Rego library, default
// policy, presets and input schema.
//
// Rules about HTTP take effect (derive.go): an allow or deny rule that reads
// input.http is copied at load without its expressions about the request, and
// the library asks the copies about each CONNECT, TLS and DNS decision, so the
// connection such a rule needs to see is intercepted, and a host an HTTP allow
// names is resolved and connected to. A rule whose connections cannot be told
// (an else chain) is refused at load, naming its file:line.
//
// Fail closed: an evaluation error, an undefined or malformed decision or a
// deadline is a deny with reason policy_error, in every mode; so is every
// decision of a bundle source that has no good bundle yet.
//
// Entry points: New, (*Engine).Decide, Reload, BundleStatus. Who fills which input field,
// the library, modes and the cache: policy/DESIGN.md; the rules
// a policy writes: policies/README.md.
//
// policy must never import: audit, config, secrets, gateway, dnsfilter, netns,
// sandboxd, daemon, cmd/airlock.
package policy
