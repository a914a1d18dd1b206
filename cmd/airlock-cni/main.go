package main

import (
	"fmt"
	"io"
	"os"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/airlock-dev/airlock/cniplugin"
)

// version is stamped at build time: -ldflags "-X main.version=v0.1.0".
var version = "dev"

const usage = `airlock-cni: airlock's CNI plugin (CNI spec 1.0), chained after the main plugin.

A container runtime runs it with CNI_COMMAND=ADD|DEL|CHECK|VERSION and the
network configuration on stdin; it is not meant to be run by hand.

ADD    attaches a selected pod's namespace (CNI_NETNS) to the node's airlock
       daemon as an island, with the pod's identity, and prints the main
       plugin's result unchanged; other pods pass through untouched. If ADD
       fails for any reason (bad configuration or CNI_ARGS, a daemon that is
       unreachable, unhealthy or refuses), the pod's interfaces are down.
DEL    detaches it (nothing to detach is success).
CHECK  fails unless the pod's rules are still in force.

Its entry in a conflist (after bridge, ptp, ...):
  {"type": "airlock-cni",
   "socket": "/run/airlock/airlock.sock",       (default)
   "timeout": "30s",                            (default; per daemon call)
   "select": {"annotation": "airlock.dev/enabled", "all": false},
   "inbound": {"mode": "accept", "ports": [8080]},  (default: accept, every port)
   "capabilities": {"io.kubernetes.cri.pod-annotations": true}}

A pod is selected by its annotation airlock.dev/enabled: "true" (passed by
containerd and CRI-O through the io.kubernetes.cri.pod-annotations
capability), by AIRLOCK_ENABLED=true in CNI_ARGS, or by "select": {"all": true}
in a conflist only one RuntimeClass's handler uses. Its identity comes from
CNI_ARGS (K8S_POD_NAMESPACE, K8S_POD_NAME, K8S_POD_UID), args.cni.serviceAccount,
and sandbox labels from args.cni.labels and annotations labels.airlock.dev/KEY.

Connections arriving at the pod (kubelet probes, Services) are let in on the
inbound ports (every TCP port when none are listed), and only their replies
leave. "capture" (plain attach's default) is refused here: on a pod's interface
it would let the pod network use airlock as the pod.
`

func main() {
	if os.Getenv("CNI_COMMAND") == "" && len(os.Args) > 1 {
		os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr))
	}
	p := &cniplugin.Plugin{}
	skel.PluginMainFuncs(skel.CNIFuncs{Add: p.Add, Del: p.Del, Check: p.Check}, cniplugin.Versions,
		"airlock-cni "+version+": airlock's CNI plugin; run with --help for its usage")
}

// cli answers the only arguments a person gives it: help and version.
func cli(args []string, stdout, stderr io.Writer) int {
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	case "--version", "version":
		fmt.Fprintf(stdout, "airlock-cni %s\n", version)
		return 0
	}
	fmt.Fprintf(stderr, "airlock-cni: unknown argument %q (a runtime runs it with CNI_COMMAND set; see --help)\n", args[0])
	return 2
}
