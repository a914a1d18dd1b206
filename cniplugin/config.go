package cniplugin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

// Defaults of Config.
const (
	// DefaultAnnotation selects a pod when its value is "true".
	DefaultAnnotation = "airlock.dev/enabled"
	// DefaultTimeout bounds one call to the daemon.
	DefaultTimeout = 30 * time.Second
	// LabelAnnotationPrefix: a pod annotation "labels.airlock.dev/K: V" is
	// the sandbox label K=V (policy's input.sandbox.labels).
	LabelAnnotationPrefix = "labels.airlock.dev/"
	// PodAnnotationsCapability is the runtimeConfig key (and capability) by
	// which containerd and CRI-O pass a pod's annotations.
	PodAnnotationsCapability = "io.kubernetes.cri.pod-annotations"
	// EnabledArg is the CNI_ARGS key that selects a pod ("AIRLOCK_ENABLED=true")
	// for runtimes that pass no annotations.
	EnabledArg = "AIRLOCK_ENABLED"
	// maxTimeout bounds Config.Timeout: a runtime waits for the plugin.
	maxTimeout = 5 * time.Minute
	// maxLabels bounds the sandbox labels one pod brings.
	maxLabels = 64
)

// The CNI_ARGS keys Kubernetes runtimes (containerd, CRI-O) set.
const (
	argPodNamespace = "K8S_POD_NAMESPACE"
	argPodName      = "K8S_POD_NAME"
	argPodUID       = "K8S_POD_UID"
)

// Config is airlock-cni's entry in a conflist, as the runtime hands it over
// on stdin (with prevResult, runtimeConfig and args filled in by it).
type Config struct {
	types.PluginConf
	// Socket is the daemon's API socket (client.DefaultSocket when empty).
	Socket string `json:"socket,omitempty"`
	// Timeout bounds one call to the daemon, a Go duration (DefaultTimeout
	// when empty, at most 5m).
	Timeout string `json:"timeout,omitempty"`
	// Select says which pods are attached; the others pass through untouched.
	Select Select `json:"select,omitzero"`
	// Inbound is what becomes of connections arriving at the pod (kubelet
	// probes, Services): {"mode": "accept", "ports": [8080]} lets in new TCP
	// connections on those ports and only their replies out, {"mode":
	// "accept"} every TCP port. Omitted: accept every TCP port. "capture"
	// (plain attach's default, right for a VM's tap) is refused: on a pod's
	// interface it would let the network egress as the pod.
	Inbound *api.Inbound `json:"inbound,omitempty"`
	// RuntimeConfig holds what the runtime passes for the capabilities the
	// entry declares; only PodAnnotationsCapability is read.
	RuntimeConfig map[string]json.RawMessage `json:"runtimeConfig,omitempty"`
	// Args is the conventions' "args" object; only args.cni.labels and
	// args.cni.serviceAccount are read (the other keys, in args.cni and
	// beside it, belong to other plugins and are left alone).
	Args map[string]json.RawMessage `json:"args,omitempty"`

	timeout     time.Duration
	annotations map[string]string
	argsCNI     ArgsCNI
}

// Select picks the pods to attach.
type Select struct {
	// All attaches every pod the conflist sees: for a conflist only one
	// RuntimeClass's handler uses (containerd's per-runtime cni_conf_dir).
	All bool `json:"all,omitempty"`
	// Annotation is the pod annotation whose value "true" selects the pod
	// (DefaultAnnotation when empty).
	Annotation string `json:"annotation,omitempty"`
}

// ArgsCNI are the keys of args.cni airlock-cni reads.
type ArgsCNI struct {
	Labels         map[string]string `json:"labels,omitempty"`
	ServiceAccount string            `json:"serviceAccount,omitempty"`
}

// ParseConfig decodes a network configuration strictly (an unknown key is an
// error naming it), applies the defaults and checks every field.
func ParseConfig(stdin []byte) (*Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(stdin))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("airlock-cni: network configuration: %w", err)
	}
	if c.Socket == "" {
		c.Socket = client.DefaultSocket
	}
	if !filepath.IsAbs(c.Socket) {
		return nil, fmt.Errorf("airlock-cni: socket: %q is not an absolute path", c.Socket)
	}
	c.timeout = DefaultTimeout
	if c.Timeout != "" {
		d, err := time.ParseDuration(c.Timeout)
		if err != nil || d <= 0 || d > maxTimeout {
			return nil, fmt.Errorf("airlock-cni: timeout: %q is not a duration between 1ms and %v", c.Timeout, maxTimeout)
		}
		c.timeout = d
	}
	if c.Inbound == nil {
		c.Inbound = &api.Inbound{Mode: api.InboundAccept}
	}
	if err := checkInbound(c.Inbound); err != nil {
		return nil, err
	}
	if c.Select.Annotation == "" {
		c.Select.Annotation = DefaultAnnotation
	}
	if raw, ok := c.RuntimeConfig[PodAnnotationsCapability]; ok && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		if err := json.Unmarshal(raw, &c.annotations); err != nil {
			return nil, fmt.Errorf("airlock-cni: runtimeConfig.%s: want an object of strings: %w", PodAnnotationsCapability, err)
		}
	}
	if raw, ok := c.Args["cni"]; ok {
		if err := json.Unmarshal(raw, &c.argsCNI); err != nil {
			return nil, fmt.Errorf("airlock-cni: args.cni: %w", err)
		}
	}
	return &c, nil
}

// checkInbound refuses, before a pod is attached, naming the key: a mode
// other than accept (capture included), a port out of range or given twice,
// more than api.MaxInboundPorts.
func checkInbound(in *api.Inbound) error {
	switch in.Mode {
	case api.InboundAccept:
	case api.InboundCapture:
		// What arrives on a pod's interface is the network, not the pod's
		// egress: capture would hand it to the pod's gateway, and a neighbour
		// would egress under the pod's identity, policy and secrets.
		return fmt.Errorf("airlock-cni: inbound.mode: %q takes connections from the pod network for the pod's own egress (a neighbour would reach airlock as the pod, with its policy and secrets); use %q with the pod's ports", api.InboundCapture, api.InboundAccept)
	default:
		return fmt.Errorf("airlock-cni: inbound.mode: %.40q is not %q", in.Mode, api.InboundAccept)
	}
	if len(in.Ports) > api.MaxInboundPorts {
		return fmt.Errorf("airlock-cni: inbound.ports: %d ports, at most %d (none lets in every TCP port)", len(in.Ports), api.MaxInboundPorts)
	}
	seen := map[int]bool{}
	for i, p := range in.Ports {
		if p < 1 || p > 65535 || seen[p] {
			return fmt.Errorf("airlock-cni: inbound.ports[%d]: %d is not a TCP port (1-65535) or is given twice", i, p)
		}
		seen[p] = true
	}
	return nil
}

// ArgsCNI is what args.cni gave.
func (c *Config) ArgsCNI() ArgsCNI { return c.argsCNI }

// TimeoutDuration is Timeout parsed (DefaultTimeout when empty).
func (c *Config) TimeoutDuration() time.Duration { return c.timeout }

// Annotations are the pod's annotations from the runtime config.
func (c *Config) Annotations() map[string]string { return maps.Clone(c.annotations) }

// cniArgs splits CNI_ARGS ("K=V;K=V"). A pair without "=" is an error, and
// so is a key given twice: the pod's identity is read from these keys, and a
// second K8S_POD_NAMESPACE must not quietly replace the first.
func cniArgs(s string) (map[string]string, error) {
	out := map[string]string{}
	if s == "" {
		return out, nil
	}
	for pair := range strings.SplitSeq(s, ";") {
		k, v, ok := strings.Cut(pair, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("airlock-cni: CNI_ARGS: %.80q is not KEY=VALUE", pair)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("airlock-cni: CNI_ARGS: key %.80q is given twice", k)
		}
		out[k] = v
	}
	return out, nil
}

// Selected reports whether the pod is to be attached: select.all, its
// selecting annotation set to "true", or AIRLOCK_ENABLED=true in CNI_ARGS.
func (c *Config) Selected(args map[string]string) bool {
	return c.Select.All || c.annotations[c.Select.Annotation] == "true" || args[EnabledArg] == "true"
}

// Pod is the identity of the pod: namespace, name and uid from CNI_ARGS (set
// by the kubelet's runtime), the service account from args.cni. Nil when
// none is known (a runtime that is not Kubernetes).
func (c *Config) Pod(args map[string]string) (*api.Pod, error) {
	p := &api.Pod{Namespace: args[argPodNamespace], Name: args[argPodName], UID: args[argPodUID]}
	p.ServiceAccount = c.argsCNI.ServiceAccount
	if *p == (api.Pod{}) {
		return nil, nil
	}
	for _, f := range [...]struct{ name, v string }{
		{argPodNamespace, p.Namespace}, {argPodName, p.Name}, {argPodUID, p.UID}, {"args.cni.serviceAccount", p.ServiceAccount},
	} {
		if len(f.v) > api.MaxPodField || strings.IndexFunc(f.v, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
			return nil, fmt.Errorf("airlock-cni: %s: %.80q is over %d bytes or has a control character", f.name, f.v, api.MaxPodField)
		}
	}
	return p, nil
}

// Labels are the sandbox labels: args.cni.labels, then every annotation
// "labels.airlock.dev/K: V" as K=V. args.cni comes from the conflist or the
// runtime, an annotation from whoever wrote the pod: an annotation naming a
// label args.cni.labels sets is an error, never an override (a pod must not
// relabel itself out of what the node's configuration says it is).
func (c *Config) Labels() (map[string]string, error) {
	out := map[string]string{}
	maps.Copy(out, c.argsCNI.Labels)
	for k, v := range c.annotations {
		if name, ok := strings.CutPrefix(k, LabelAnnotationPrefix); ok {
			if name == "" {
				return nil, fmt.Errorf("airlock-cni: annotation %q names no label", k)
			}
			if _, set := c.argsCNI.Labels[name]; set {
				return nil, fmt.Errorf("airlock-cni: annotation %.80q: label %.80q is set by args.cni.labels; a pod annotation cannot change it", k, name)
			}
			out[name] = v
		}
	}
	if len(out) > maxLabels {
		return nil, fmt.Errorf("airlock-cni: %d labels, at most %d", len(out), maxLabels)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}
