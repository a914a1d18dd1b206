// Package cniplugin is airlock-cni's logic: a chained CNI plugin (spec 1.0)
// that asks the node's `airlock serve` to attach a selected pod's network
// namespace as an island, with the pod's identity, and passes the main
// plugin's result through. It owns the plugin's network configuration
// (Config, ParseConfig), pod selection (annotation or select.all), the pod
// identity read from CNI_ARGS and the runtime config, the sandbox id derived
// from the container id (SandboxID), and ADD, DEL and CHECK (Plugin). ADD
// fails closed: any failure of it (input, an unhealthy daemon, the attach, a
// panic) takes the namespace's interfaces down. Entry point: Plugin.Add, Del and Check, called by cmd/airlock-cni
// through the CNI skel. Usage and the conflist: README.md, "Kubernetes (CNI)";
// design: netns/DESIGN.md, "CNI plugin".
//
// cniplugin must never import: audit/..., daemon, gateway/..., netns/..., policy/..., sandboxd/..., dnsfilter/..., test/....
package cniplugin
