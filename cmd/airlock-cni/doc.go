// Command airlock-cni is airlock's CNI plugin (spec 1.0): chained after a
// cluster's main plugin, it has the node's `airlock serve` attach selected
// pods' namespaces as islands. The runtime runs it with CNI_COMMAND set;
// without one it prints its usage. The logic lives in package cniplugin.
//
// Entry point: main.go. Usage and the conflist: docs/KUBERNETES.md.
//
// cmd/airlock-cni must never import: audit/..., daemon, gateway/..., netns/..., policy/..., test/....
package main
