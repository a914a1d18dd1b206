// Package daemon assembles one running airlock: the policy engine, the audit
// writer, budget and tally, the DNS filter, the gateway, the secrets injector,
// the island namespace manager and the executor, built from the one config
// schema (package config). `airlock run` uses it for a single task, `airlock
// attach` to serve an existing namespace, and `airlock serve` holds one for
// many sandboxes behind its HTTP+JSON API (Handler).
//
// It owns the glue and the order: what each part is given (the addresses the
// gateway always refuses, the audit logger chain, the merged CA bundle, the
// host paths a sandbox must never see), and the life of a task: free space on
// the audit log's filesystem, namespace, placeholders, exec, teardown. It
// decides nothing about traffic itself.
//
// It also holds the sandboxes of the API: a registry of long-lived sandboxes by
// owner (the uid SO_PEERCRED gives each connection), a warm pool of prepared
// ones that sizes itself between sandbox.pool_size and pool.max from the
// observed create rate (pool.go), their lifetimes, execs, files, events and metrics, built on seams over
// the executor (sandboxd) and the namespaces (netns).
//
// Changes (PATCH, update.go), approvals (approval*.go, webhook.go) and the
// per-user daemon (`serve --user`, userapi.go: a 0600 socket, only its
// owner, rootless sandboxes and their warm pool, rootless_pool.go) are
// described in daemon/DESIGN.md.
//
// Entry points: New, (*Daemon).Run, Attach, Detach, Handler, APIServer,
// ListenAPI, ListenUserAPI, RaiseNOFILE, ConnContext, Shutdown, Close. The build order step
// by step and the sandbox API: daemon/DESIGN.md.
//
// daemon must never import: cmd/airlock, bench/..., netns/netnstest, test/....
package daemon
