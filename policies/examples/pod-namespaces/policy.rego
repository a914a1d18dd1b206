# Allowlists by Kubernetes namespace: a pod the airlock-cni plugin attached
# may reach the hosts its namespace's entry lists (data.json), and pods of
# namespace "sandbox" may write nothing. input.sandbox.pod comes from the
# runtime (CNI_ARGS), never from the pod; sandboxes that are not pods have no
# input.sandbox.pod and get the defaults only.
package airlock.egress

import data.airlock

allow if {
	input.kind != "tcp"
	airlock.host_in(data.namespace_hosts[input.sandbox.pod.namespace])
}

deny contains {"id": "sandbox_namespace_read_only", "msg": "pods of namespace sandbox may only read"} if {
	input.sandbox.pod.namespace == "sandbox"
	input.kind == "http"
	not input.http.method in {"GET", "HEAD", "OPTIONS"}
}
