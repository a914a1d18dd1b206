package identity

// Kind names what is being decided. Every kind shares one input shape.
type Kind string

// The kinds of decision the gateway, DNS filter and netns drop logger ask for.
const (
	KindHTTP    Kind = "http"
	KindConnect Kind = "connect"
	KindTLS     Kind = "tls"
	KindTCP     Kind = "tcp"
	KindDNS     Kind = "dns"
)

// Mode says whether a decision is enforced or only reported.
type Mode string

// Modes.
const (
	ModeEnforce Mode = "enforce"
	ModeReport  Mode = "report"
)

// Sandbox identifies who is asking. It comes from the listener that accepted the
// connection, never from anything the sandbox sent.
type Sandbox struct {
	ID     string            `json:"id"`
	Labels map[string]string `json:"labels,omitempty"`
	// Mode is this sandbox's mode: ModeEnforce, ModeReport, or empty for the
	// engine's (policy's Config.Mode). A policy's own report/enforce rules
	// still win (enforce over report), and a policy error is never let
	// through. Any other value is a policy_error deny.
	Mode Mode `json:"mode,omitempty"`
	// Allow holds hosts reachable from this sandbox only, with --allow's
	// meaning (NewAllowList). The library's allowed_host matches them with the
	// port rules of data.airlock.hosts.allow; a policy's deny rules still win.
	Allow *AllowList `json:"allow,omitempty"`
	// Pod is the Kubernetes pod this sandbox is, for a namespace attached by
	// the CNI plugin (airlock-cni); nil otherwise. A policy can match by pod
	// namespace or service account: input.sandbox.pod.namespace == "ci".
	Pod *Pod `json:"pod,omitempty"`
}

// Pod is a Kubernetes pod's identity as its runtime gave it to the CNI
// plugin: on a sandbox, in policy's input, on an audit record and in the
// API. Empty fields were not given and are absent from the JSON.
type Pod struct {
	Namespace      string `json:"namespace,omitempty"`
	Name           string `json:"name,omitempty"`
	UID            string `json:"uid,omitempty"`
	ServiceAccount string `json:"service_account,omitempty"`
}
