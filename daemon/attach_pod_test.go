package daemon

import (
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/netns"
)

// TestNetnsInbound: an attach's inbound is checked before anything is
// touched, and a refusal names the field at fault.
func TestNetnsInbound(t *testing.T) {
	tests := []struct {
		name  string
		in    *api.Inbound
		want  string // netns's String of the result, when valid
		field string // "" for valid
	}{
		{"none", nil, "capture", ""},
		{"empty", &api.Inbound{}, "capture", ""},
		{"capture", &api.Inbound{Mode: api.InboundCapture}, "capture", ""},
		{"accept all", &api.Inbound{Mode: api.InboundAccept}, "accept all TCP ports", ""},
		{"accept ports", &api.Inbound{Mode: api.InboundAccept, Ports: []int{8443, 8080}}, "accept TCP 8080,8443", ""},
		{"unknown mode", &api.Inbound{Mode: "open"}, "", "inbound.mode"},
		{"ports with capture", &api.Inbound{Mode: api.InboundCapture, Ports: []int{80}}, "", "inbound.ports"},
		{"port out of range", &api.Inbound{Mode: api.InboundAccept, Ports: []int{80, 70000}}, "", "inbound.ports[1]"},
		{"repeated port", &api.Inbound{Mode: api.InboundAccept, Ports: []int{80, 80}}, "", "inbound.ports[1]"},
		{"too many ports", &api.Inbound{Mode: api.InboundAccept, Ports: make([]int, api.MaxInboundPorts+1)}, "", "inbound.ports"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, e := netnsInbound(tc.in)
			switch {
			case tc.field == "" && e != nil:
				t.Fatalf("got %v, want valid", e)
			case tc.field == "" && got.String() != tc.want:
				t.Fatalf("got %v, want %s", got, tc.want)
			case tc.field != "" && (e == nil || e.Field != tc.field || e.Code != api.CodeInvalidField || !strings.HasPrefix(e.Message, tc.field+":")):
				t.Fatalf("got %+v, want invalid_field %s", e, tc.field)
			}
		})
	}
	// The API's names and bounds are netns's.
	if api.InboundCapture != string(netns.InboundCapture) || api.InboundAccept != string(netns.InboundAccept) || api.MaxInboundPorts != netns.MaxInboundPorts {
		t.Errorf("api and netns disagree on inbound modes or the port limit")
	}
}

func TestValidatePod(t *testing.T) {
	tests := []struct {
		name  string
		pod   *api.Pod
		field string // "" for valid
	}{
		{"none", nil, ""},
		{"full", &api.Pod{Namespace: "ci", Name: "agent-0.web", UID: "6F1C0B2E-9d3a-4c1e-8f00-0123456789ab", ServiceAccount: "runner"}, ""},
		{"empty", &api.Pod{}, ""},
		{"longest name", &api.Pod{Name: strings.Repeat("a", min(253, api.MaxPodField))}, ""},
		{"name too long", &api.Pod{Name: strings.Repeat("a", min(253, api.MaxPodField)+1)}, "pod.name"},
		{"namespace too long", &api.Pod{Namespace: strings.Repeat("a", 64)}, "pod.namespace"},
		// Kubernetes' syntax: a policy matching "prod" is never handed a
		// look-alike.
		{"trailing space", &api.Pod{Namespace: "prod "}, "pod.namespace"},
		{"upper case", &api.Pod{Namespace: "PROD"}, "pod.namespace"},
		{"dot in namespace", &api.Pod{Namespace: "prod.x"}, "pod.namespace"},
		{"leading dash", &api.Pod{Name: "-web"}, "pod.name"},
		{"trailing dot", &api.Pod{ServiceAccount: "runner."}, "pod.service_account"},
		{"unicode look-alike", &api.Pod{Namespace: "prоd"}, "pod.namespace"},
		{"slash in uid", &api.Pod{UID: "a/b"}, "pod.uid"},
		{"newline in namespace", &api.Pod{Namespace: "ci\n{\"forged\":1}"}, "pod.namespace"},
		{"NUL in uid", &api.Pod{UID: "u\x00"}, "pod.uid"},
		{"DEL in service account", &api.Pod{ServiceAccount: "sa\x7f"}, "pod.service_account"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := validatePod(tc.pod)
			switch {
			case tc.field == "" && e != nil:
				t.Fatalf("got %v, want valid", e)
			case tc.field != "" && (e == nil || e.Field != tc.field || e.Code != api.CodeInvalidField):
				t.Fatalf("got %+v, want invalid_field %s", e, tc.field)
			}
		})
	}
}

// TestAccountsStampPod: every record of an attached pod's sandbox gets its
// own copy of the pod, other sandboxes' records none, and stamping stops
// when the pod is unset.
func TestAccountsStampPod(t *testing.T) {
	var got []*audit.Record
	a := newAccounts()
	log := audit.Observe(loggerFunc(func(r *audit.Record) error { got = append(got, r); return nil }), a)
	pod := &audit.Pod{Namespace: "ci", Name: "agent-0", UID: "u-1"}
	a.setPod("alk-pod-1", pod)
	recs := []*audit.Record{{Sandbox: "alk-pod-1", Kind: audit.KindTCP}, {Sandbox: "alk-pod-1", Kind: audit.KindDNS}, {Sandbox: "sb-other", Kind: audit.KindTCP}, {Kind: audit.KindCheckpoint}}
	for _, r := range recs {
		if err := log.Log(r); err != nil {
			t.Fatal(err)
		}
	}
	if got[0].Pod == nil || *got[0].Pod != *pod || got[1].Pod == nil || *got[1].Pod != *pod {
		t.Fatalf("pod records: got %+v, %+v; want %+v", got[0].Pod, got[1].Pod, pod)
	}
	if got[0].Pod == got[1].Pod || got[0].Pod == pod {
		t.Error("records share one pod value: a writer changing one would change the others")
	}
	if got[2].Pod != nil || got[3].Pod != nil {
		t.Errorf("records of other sandboxes got a pod: %+v, %+v", got[2].Pod, got[3].Pod)
	}
	if a.claimPod("alk-pod-1", &audit.Pod{Namespace: "intruder"}) {
		t.Error("a second claim of the same id replaced the pod")
	}
	a.setPod("alk-pod-1", nil)
	r := &audit.Record{Sandbox: "alk-pod-1", Kind: audit.KindTCP}
	_ = log.Log(r)
	if r.Pod != nil {
		t.Errorf("after the pod was unset: got %+v, want none", r.Pod)
	}
}

type loggerFunc func(*audit.Record) error

func (f loggerFunc) Log(r *audit.Record) error { return f(r) }
