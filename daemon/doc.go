// Package daemon assembles one running airlock: the policy engine, the audit
// writer, the DNS filter, the gateway, the secrets injector, the island
// namespace manager and the executor, built from the one config schema
// (package config). `airlock run` uses it in-process for a single task,
// `airlock attach` to serve an existing namespace, and a long-running
// `airlock serve` would hold one for many.
//
// It owns the glue and the order: what each part is given (the addresses the
// gateway always refuses: the host's own and the DNS upstreams'; the audit
// budget between the gateway and the tally), the merged CA bundle a sandbox
// trusts (system roots, the interception CA, the operator's upstream CA),
// which host paths a sandbox must never see, and the life of a task: free
// space on the audit log's filesystem, namespace, placeholders, exec,
// teardown. It decides nothing about traffic itself.
//
// daemon may import every airlock package; no airlock package may import it.
package daemon
