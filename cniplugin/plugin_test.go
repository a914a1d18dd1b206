package cniplugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client/clienttest"
	"github.com/airlock-dev/airlock/netns"
)

// prevResult is what a bridge + host-local ADD returns, as the runtime
// passes it to the next plugin.
const prevResult = `{"cniVersion":"1.0.0","interfaces":[{"name":"alk-br0","mac":"aa:bb:cc:dd:ee:01"},{"name":"eth0","mac":"aa:bb:cc:dd:ee:02","sandbox":"/run/netns/x"}],` +
	`"ips":[{"interface":1,"address":"10.231.7.2/24","gateway":"10.231.7.1"}],"routes":[{"dst":"0.0.0.0/0"}],"dns":{}}`

// conf is a network configuration for socket with the given pod
// annotations (nil: none) and prevResult.
func conf(t *testing.T, socket string, annotations map[string]string, withPrev bool) []byte {
	t.Helper()
	c := map[string]any{"cniVersion": "1.0.0", "name": "pods", "type": "airlock-cni", "socket": socket,
		"args": map[string]any{"cni": map[string]any{"serviceAccount": "runner"}}}
	if annotations != nil {
		c["runtimeConfig"] = map[string]any{PodAnnotationsCapability: annotations}
	}
	if withPrev {
		c["prevResult"] = json.RawMessage(prevResult)
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const podArgs = "IgnoreUnknown=1;K8S_POD_NAMESPACE=ci;K8S_POD_NAME=agent-0;K8S_POD_UID=u-1"

var enabled = map[string]string{DefaultAnnotation: "true", LabelAnnotationPrefix + "team": "ml"}

// harness is a plugin against the fake daemon, recording quarantines.
type harness struct {
	fake        *clienttest.Server
	p           *Plugin
	out         *bytes.Buffer
	quarantined []string
}

func newHarness(t *testing.T) *harness {
	h := &harness{fake: clienttest.New(t), out: &bytes.Buffer{}}
	h.p = &Plugin{Stdout: h.out, Quarantine: func(ns string) error { h.quarantined = append(h.quarantined, ns); return nil }}
	return h
}

func cmdArgs(stdin []byte) *skel.CmdArgs {
	return &skel.CmdArgs{ContainerID: "c0ffee", Netns: "/run/netns/alk-test", IfName: "eth0", Args: podArgs, StdinData: stdin}
}

// cniCode is the CNI error code of err (0 for nil, -1 for an error that is
// not a *types.Error).
func cniCode(err error) int {
	if err == nil {
		return 0
	}
	var te *types.Error
	if errors.As(err, &te) {
		return int(te.Code)
	}
	return -1
}

func TestSandboxID(t *testing.T) {
	for _, cid := range []string{"c0ffee", strings.Repeat("f", 64), "a", "pod_with.dots-and-dashes"} {
		id := SandboxID(cid)
		if err := netns.ValidateID(id); err != nil {
			t.Errorf("SandboxID(%q) = %q: %v", cid, id, err)
		}
		if SandboxID(cid) != id || !strings.HasPrefix(id, SandboxIDPrefix) {
			t.Errorf("SandboxID(%q) = %q: not deterministic or without the prefix", cid, id)
		}
	}
	if SandboxID("a") == SandboxID("b") {
		t.Error("two containers got the same sandbox id")
	}
}

func TestAddAttachesAndPassesThrough(t *testing.T) {
	h := newHarness(t)
	if err := h.p.Add(cmdArgs(conf(t, h.fake.Socket, enabled, true))); err != nil {
		t.Fatalf("add: %v", err)
	}
	req, ok := h.fake.Attached()[SandboxID("c0ffee")]
	if !ok {
		t.Fatalf("the daemon attached %v, want %s", h.fake.Attached(), SandboxID("c0ffee"))
	}
	want := api.Pod{Namespace: "ci", Name: "agent-0", UID: "u-1", ServiceAccount: "runner"}
	if req.NetNS != "/run/netns/alk-test" || req.Pod == nil || *req.Pod != want || req.Labels["team"] != "ml" {
		t.Errorf("attach request: got %+v (pod %+v), want netns /run/netns/alk-test, pod %+v, label team=ml", req, req.Pod, want)
	}
	if req.Inbound == nil || req.Inbound.Mode != api.InboundAccept {
		t.Errorf("attach request's inbound: got %+v, want accept (the default for pods)", req.Inbound)
	}
	var got, prev map[string]any
	if err := json.Unmarshal(h.out.Bytes(), &got); err != nil {
		t.Fatalf("result %q: %v", h.out, err)
	}
	_ = json.Unmarshal([]byte(prevResult), &prev)
	delete(prev, "dns") // an empty DNS is left out of the printed result
	if gb, pb := mustJSON(t, got), mustJSON(t, prev); gb != pb {
		t.Errorf("result: got %s, want prevResult %s", gb, pb)
	}
	if len(h.quarantined) != 0 {
		t.Errorf("quarantined %v after a successful add", h.quarantined)
	}
}

func TestAddNotSelectedPassesThroughWithoutDaemon(t *testing.T) {
	h := newHarness(t)
	gone := filepath.Join(t.TempDir(), "no-daemon.sock")
	for name, ann := range map[string]map[string]string{"no annotations": nil, "annotation false": {DefaultAnnotation: "false"}} {
		h.out.Reset()
		if err := h.p.Add(cmdArgs(conf(t, gone, ann, true))); err != nil {
			t.Fatalf("%s: add: %v", name, err)
		}
		if !strings.Contains(h.out.String(), "10.231.7.2/24") {
			t.Errorf("%s: result %q lacks prevResult's address", name, h.out)
		}
	}
	if len(h.quarantined) != 0 {
		t.Errorf("quarantined %v a pod that was not selected", h.quarantined)
	}
}

func TestAddFailsClosed(t *testing.T) {
	t.Run("daemon unreachable", func(t *testing.T) {
		h := newHarness(t)
		gone := filepath.Join(t.TempDir(), "no-daemon.sock")
		err := h.p.Add(cmdArgs(conf(t, gone, enabled, true)))
		if cniCode(err) != int(types.ErrTryAgainLater) || !strings.Contains(err.Error(), "unreachable") || !strings.Contains(err.Error(), gone) {
			t.Fatalf("got %v (code %d), want code %d naming the socket as unreachable", err, cniCode(err), types.ErrTryAgainLater)
		}
		if h.out.Len() != 0 {
			t.Errorf("printed a result %q on failure", h.out)
		}
		if len(h.quarantined) != 1 || h.quarantined[0] != "/run/netns/alk-test" {
			t.Errorf("quarantined %v, want the pod's namespace", h.quarantined)
		}
	})
	t.Run("daemon refuses", func(t *testing.T) {
		h := newHarness(t)
		a := cmdArgs(conf(t, h.fake.Socket, enabled, true))
		if err := h.p.Add(a); err != nil {
			t.Fatal(err)
		}
		h.quarantined = nil
		err := h.p.Add(a) // the same container again: the daemon says conflict
		if cniCode(err) != int(ErrAttach) || !strings.Contains(err.Error(), api.CodeConflict) {
			t.Fatalf("got %v (code %d), want code %d with the daemon's conflict", err, cniCode(err), ErrAttach)
		}
		if len(h.quarantined) != 1 {
			t.Errorf("quarantined %v, want the pod's namespace", h.quarantined)
		}
	})
	t.Run("daemon not healthy", func(t *testing.T) {
		h := newHarness(t)
		h.fake.SetFailing(api.HealthPartAudit, "audit log: disk full")
		err := h.p.Add(cmdArgs(conf(t, h.fake.Socket, enabled, true)))
		if cniCode(err) != int(ErrAttach) || !strings.Contains(err.Error(), "disk full") {
			t.Fatalf("got %v (code %d), want code %d naming the failing part", err, cniCode(err), ErrAttach)
		}
		if len(h.fake.Attached()) != 0 || len(h.quarantined) != 1 {
			t.Errorf("attached %v, quarantined %v; want nothing attached and the namespace quarantined", h.fake.Attached(), h.quarantined)
		}
	})
	t.Run("only the warm pool failing still attaches", func(t *testing.T) {
		h := newHarness(t)
		h.fake.SetFailing(api.HealthPartPool, "prepare: no space")
		if err := h.p.Add(cmdArgs(conf(t, h.fake.Socket, enabled, true))); err != nil {
			t.Fatalf("got %v, want the attach (an attach never takes from the pool)", err)
		}
		if len(h.fake.Attached()) != 1 || len(h.quarantined) != 0 {
			t.Errorf("attached %v, quarantined %v; want the pod attached, nothing quarantined", h.fake.Attached(), h.quarantined)
		}
	})
	t.Run("quarantine fails too", func(t *testing.T) {
		h := newHarness(t)
		h.p.Quarantine = func(string) error { return errors.New("no such namespace") }
		err := h.p.Add(cmdArgs(conf(t, filepath.Join(t.TempDir(), "x.sock"), enabled, true)))
		if cniCode(err) != int(ErrQuarantine) || !strings.Contains(err.Error(), "unreachable") || !strings.Contains(err.Error(), "no such namespace") {
			t.Fatalf("got %v (code %d), want code %d naming both failures", err, cniCode(err), ErrQuarantine)
		}
	})
}

func TestAddBadInput(t *testing.T) {
	h := newHarness(t)
	tests := []struct {
		name string
		args *skel.CmdArgs
		code uint
		want string
	}{
		{"no prevResult", cmdArgs(conf(t, h.fake.Socket, enabled, false)), types.ErrInvalidNetworkConfig, "chain it after"},
		{"bad config", cmdArgs([]byte(`{"type":"airlock-cni","socket":"rel.sock"}`)), types.ErrDecodingFailure, "socket"},
		{"bad CNI_ARGS", &skel.CmdArgs{ContainerID: "c", Netns: "/x", Args: "K8S_POD_NAME", StdinData: conf(t, h.fake.Socket, enabled, true)}, types.ErrInvalidEnvironmentVariables, "CNI_ARGS"},
		{"pod field too long", &skel.CmdArgs{ContainerID: "c", Netns: "/x", Args: "K8S_POD_NAME=" + strings.Repeat("a", 300), StdinData: conf(t, h.fake.Socket, enabled, true)}, types.ErrInvalidEnvironmentVariables, "K8S_POD_NAME"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := h.p.Add(tc.args)
			if cniCode(err) != int(tc.code) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v (code %d), want code %d mentioning %q", err, cniCode(err), tc.code, tc.want)
			}
		})
	}
	if len(h.fake.Attached()) != 0 {
		t.Errorf("bad input attached %v", h.fake.Attached())
	}
	// Bad input fails closed too: whether the pod was to be attached cannot
	// be trusted when its configuration does not parse.
	if len(h.quarantined) != len(tests) {
		t.Errorf("quarantined %v, want each of the %d namespaces", h.quarantined, len(tests))
	}
}

func TestDel(t *testing.T) {
	h := newHarness(t)
	a := cmdArgs(conf(t, h.fake.Socket, enabled, true))
	if err := h.p.Add(a); err != nil {
		t.Fatal(err)
	}
	if err := h.p.Del(a); err != nil {
		t.Fatalf("del: %v", err)
	}
	if len(h.fake.Attached()) != 0 {
		t.Fatalf("still attached after del: %v", h.fake.Attached())
	}
	if err := h.p.Del(a); err != nil {
		t.Errorf("second del: got %v, want success", err)
	}
	noNetns := *a
	noNetns.Netns = ""
	if err := h.p.Del(&noNetns); err != nil {
		t.Errorf("del without a namespace: got %v, want success", err)
	}
	gone := filepath.Join(t.TempDir(), "no-daemon.sock")
	if err := h.p.Del(cmdArgs(conf(t, gone, nil, false))); err != nil {
		t.Errorf("del of a pod not selected, daemon down: got %v, want success", err)
	}
	if err := h.p.Del(cmdArgs(conf(t, gone, enabled, false))); cniCode(err) != int(types.ErrTryAgainLater) {
		t.Errorf("del of a selected pod, daemon down: got %v, want code %d (retry, or the namespace airlock holds leaks)", err, types.ErrTryAgainLater)
	}
}

func TestCheck(t *testing.T) {
	h := newHarness(t)
	a := cmdArgs(conf(t, h.fake.Socket, enabled, true))
	if err := h.p.Check(a); cniCode(err) != int(ErrNotInForce) || !strings.Contains(err.Error(), "not attached") {
		t.Errorf("check before add: got %v, want code %d, not attached", err, ErrNotInForce)
	}
	if err := h.p.Add(a); err != nil {
		t.Fatal(err)
	}
	if err := h.p.Check(a); err != nil {
		t.Errorf("check after add: %v", err)
	}
	h.fake.SetAttachProblem(SandboxID("c0ffee"), "netns: rules not in force: filter OUTPUT has no jump to AIRLOCK-OUT")
	if err := h.p.Check(a); cniCode(err) != int(ErrNotInForce) || !strings.Contains(err.Error(), "AIRLOCK-OUT") {
		t.Errorf("check after a rule was removed: got %v, want code %d naming the rule", err, ErrNotInForce)
	}
	if err := h.p.Check(cmdArgs(conf(t, h.fake.Socket, nil, true))); err != nil {
		t.Errorf("check of a pod not selected: got %v, want success", err)
	}
	gone := filepath.Join(t.TempDir(), "no-daemon.sock")
	if err := h.p.Check(cmdArgs(conf(t, gone, enabled, true))); cniCode(err) != int(types.ErrTryAgainLater) {
		t.Errorf("check with the daemon down: got %v, want code %d", err, types.ErrTryAgainLater)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
