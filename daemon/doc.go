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
// A running sandbox's allow list, labels and mode change with PATCH
// /v1/sandboxes/{id} (update.go); requests the policy asks a person about
// are held by the approvals broker (approval.go, approval_api.go,
// webhook.go: GET /v1/approvals, POST /v1/approvals/{id}).
//
// A per-user daemon (`airlock serve --user`, Options.Owner with
// Options.Rootless; userapi.go) listens on a 0600 socket in a directory only
// its user may write (ListenUserAPI, CheckUserDir), refuses every peer uid
// but its owner's, root's included, and makes the API's sandboxes rootless,
// one by one (buildRootless: no warm pool).
//
// Entry points: New, (*Daemon).Run, Attach, Detach, Handler, APIServer,
// ListenAPI, ListenUserAPI, RaiseNOFILE, ConnContext, Shutdown, Close. The build order step
// by step and the sandbox API: daemon/DESIGN.md.
//
// daemon must never import: cmd/airlock, bench/..., netns/netnstest, test/....
package daemon
