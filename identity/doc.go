// Package identity owns who is asking and what kind of thing is decided, the
// types every layer passes along without needing the policy engine: Sandbox
// (id, labels, mode, its own AllowList, its Pod), Pod, Mode and Kind, and the
// allow-entry grammar (NormalizeAllow, HostPorts). policy aliases them
// (policy.Sandbox is identity.Sandbox), so netns, the API wire types and
// audit share one Pod and do not compile OPA.
//
// Entry points: Sandbox, Pod, NewAllowList, NormalizeAllow.
//
// identity must never import: any other airlock package but hostname.
package identity
