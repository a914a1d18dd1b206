package daemon

import (
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
)

func TestValidatePod(t *testing.T) {
	tests := []struct {
		name  string
		pod   *api.Pod
		field string // "" for valid
	}{
		{"none", nil, ""},
		{"full", &api.Pod{Namespace: "ci", Name: "agent-0", UID: "6f1c", ServiceAccount: "runner"}, ""},
		{"empty", &api.Pod{}, ""},
		{"longest name", &api.Pod{Name: strings.Repeat("a", api.MaxPodField)}, ""},
		{"name too long", &api.Pod{Name: strings.Repeat("a", api.MaxPodField+1)}, "pod.name"},
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
	a := newAccounts(loggerFunc(func(r *audit.Record) error { got = append(got, r); return nil }))
	pod := &audit.Pod{Namespace: "ci", Name: "agent-0", UID: "u-1"}
	a.setPod("alk-pod-1", pod)
	recs := []*audit.Record{{Sandbox: "alk-pod-1", Kind: audit.KindTCP}, {Sandbox: "alk-pod-1", Kind: audit.KindDNS}, {Sandbox: "sb-other", Kind: audit.KindTCP}, {Kind: audit.KindCheckpoint}}
	for _, r := range recs {
		if err := a.Log(r); err != nil {
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
	_ = a.Log(r)
	if r.Pod != nil {
		t.Errorf("after the pod was unset: got %+v, want none", r.Pod)
	}
}

type loggerFunc func(*audit.Record) error

func (f loggerFunc) Log(r *audit.Record) error { return f(r) }
