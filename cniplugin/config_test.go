package cniplugin

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name, src string
		want      string // "" for success, else part of the error
		check     func(t *testing.T, c *Config)
	}{
		{name: "defaults", src: `{"cniVersion":"1.0.0","name":"pods","type":"airlock-cni"}`, check: func(t *testing.T, c *Config) {
			if c.Socket != client.DefaultSocket || c.TimeoutDuration() != DefaultTimeout || c.Select.Annotation != DefaultAnnotation || c.Select.All {
				t.Errorf("got socket %q, timeout %v, select %+v; want the defaults", c.Socket, c.TimeoutDuration(), c.Select)
			}
			// A pod answers kubelet probes and Services by default.
			if c.Inbound == nil || c.Inbound.Mode != api.InboundAccept || len(c.Inbound.Ports) != 0 {
				t.Errorf("got inbound %+v, want accept on every TCP port", c.Inbound)
			}
		}},
		{name: "inbound ports", src: `{"type":"airlock-cni","inbound":{"mode":"accept","ports":[8080,8443]}}`, check: func(t *testing.T, c *Config) {
			if c.Inbound.Mode != api.InboundAccept || !slices.Equal(c.Inbound.Ports, []int{8080, 8443}) {
				t.Errorf("got inbound %+v, want accept 8080, 8443", c.Inbound)
			}
		}},
		// Capture on a pod's veth would let a neighbour egress as the pod
		// (netns TestAttachCaptureServesTheNetwork shows it does).
		{name: "inbound capture refused", src: `{"type":"airlock-cni","inbound":{"mode":"capture"}}`, want: `inbound.mode: "capture" takes connections from the pod network`},
		{name: "inbound unknown mode", src: `{"type":"airlock-cni","inbound":{"mode":"open"}}`, want: `inbound.mode: "open" is not`},
		{name: "inbound no mode", src: `{"type":"airlock-cni","inbound":{"ports":[80]}}`, want: `inbound.mode: "" is not`},
		{name: "inbound ports with capture", src: `{"type":"airlock-cni","inbound":{"mode":"capture","ports":[80]}}`, want: `inbound.mode: "capture"`},
		{name: "inbound port 0", src: `{"type":"airlock-cni","inbound":{"mode":"accept","ports":[80,0]}}`, want: "inbound.ports[1]: 0 is not a TCP port"},
		{name: "inbound port twice", src: `{"type":"airlock-cni","inbound":{"mode":"accept","ports":[80,80]}}`, want: "inbound.ports[1]: 80"},
		{name: "inbound unknown key", src: `{"type":"airlock-cni","inbound":{"mode":"accept","udp":[53]}}`, want: `unknown field "udp"`},
		{name: "everything", src: `{"cniVersion":"1.0.0","name":"pods","type":"airlock-cni","socket":"/run/x/a.sock","timeout":"5s",
			"select":{"all":true,"annotation":"example.com/airlock"},"capabilities":{"io.kubernetes.cri.pod-annotations":true},
			"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"a":"b"},"portMappings":[]},
			"args":{"cni":{"labels":{"team":"ml"},"serviceAccount":"runner","ips":["10.0.0.2"]},"other":{}},
			"prevResult":{"cniVersion":"1.0.0","interfaces":[]}}`, check: func(t *testing.T, c *Config) {
			if c.Socket != "/run/x/a.sock" || c.TimeoutDuration() != 5*time.Second || !c.Select.All || c.Select.Annotation != "example.com/airlock" {
				t.Errorf("got %+v", c)
			}
			if c.Annotations()["a"] != "b" || c.ArgsCNI().ServiceAccount != "runner" || c.RawPrevResult == nil {
				t.Errorf("got annotations %v, args %+v, prevResult %v", c.Annotations(), c.ArgsCNI(), c.RawPrevResult)
			}
		}},
		{name: "annotations null", src: `{"type":"airlock-cni","runtimeConfig":{"io.kubernetes.cri.pod-annotations":null}}`},
		{name: "unknown key", src: `{"type":"airlock-cni","sockets":"/run/a.sock"}`, want: `unknown field "sockets"`},
		{name: "unknown select key", src: `{"type":"airlock-cni","select":{"runtimeClass":"x"}}`, want: `unknown field "runtimeClass"`},
		{name: "relative socket", src: `{"type":"airlock-cni","socket":"airlock.sock"}`, want: "socket"},
		{name: "bad timeout", src: `{"type":"airlock-cni","timeout":"soon"}`, want: "timeout"},
		{name: "zero timeout", src: `{"type":"airlock-cni","timeout":"0s"}`, want: "timeout"},
		{name: "huge timeout", src: `{"type":"airlock-cni","timeout":"1h"}`, want: "timeout"},
		{name: "annotations not strings", src: `{"type":"airlock-cni","runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"a":1}}}`, want: "runtimeConfig.io.kubernetes.cri.pod-annotations"},
		{name: "args.cni labels not strings", src: `{"type":"airlock-cni","args":{"cni":{"labels":{"a":1}}}}`, want: "args.cni"},
		{name: "not json", src: `type: airlock-cni`, want: "network configuration"},
		{name: "empty", src: ``, want: "network configuration"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tc.src))
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got %v, want an error mentioning %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("got %v, want nil", err)
			}
			if tc.check != nil {
				tc.check(t, c)
			}
		})
	}
}

func TestCNIArgs(t *testing.T) {
	tests := []struct {
		name, src string
		want      map[string]string
		err       string
	}{
		{"empty", "", map[string]string{}, ""},
		{"kubernetes", "IgnoreUnknown=1;K8S_POD_NAMESPACE=ci;K8S_POD_NAME=agent-0;K8S_POD_UID=u-1", map[string]string{"IgnoreUnknown": "1", argPodNamespace: "ci", argPodName: "agent-0", argPodUID: "u-1"}, ""},
		{"value with =", "A=b=c", map[string]string{"A": "b=c"}, ""},
		{"empty value", "A=", map[string]string{"A": ""}, ""},
		{"no =", "A=1;B", nil, `"B" is not KEY=VALUE`},
		{"empty key", "=1", nil, `"=1" is not KEY=VALUE`},
		{"trailing ;", "A=1;", nil, `"" is not KEY=VALUE`},
		// A second namespace must not replace the runtime's first.
		{"namespace twice", "K8S_POD_NAMESPACE=ci;K8S_POD_NAME=a;K8S_POD_NAMESPACE=kube-system", nil, `key "K8S_POD_NAMESPACE" is given twice`},
		{"key twice same value", "A=1;A=1", nil, `key "A" is given twice`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := cniArgs(tc.src)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want an error mentioning %q", err, tc.err)
				}
				return
			}
			if err != nil || len(got) != len(tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s: got %q, want %q", k, got[k], v)
				}
			}
		})
	}
}

func TestSelected(t *testing.T) {
	tests := []struct {
		name, src string
		args      map[string]string
		want      bool
	}{
		{"no annotation", `{"type":"airlock-cni"}`, nil, false},
		{"annotation true", `{"type":"airlock-cni","runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"airlock.dev/enabled":"true"}}}`, nil, true},
		{"annotation false", `{"type":"airlock-cni","runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"airlock.dev/enabled":"false"}}}`, nil, false},
		{"annotation True is not true", `{"type":"airlock-cni","runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"airlock.dev/enabled":"True"}}}`, nil, false},
		{"other annotation key", `{"type":"airlock-cni","select":{"annotation":"example.com/egress"},"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"airlock.dev/enabled":"true"}}}`, nil, false},
		{"own annotation key", `{"type":"airlock-cni","select":{"annotation":"example.com/egress"},"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"example.com/egress":"true"}}}`, nil, true},
		{"all", `{"type":"airlock-cni","select":{"all":true}}`, nil, true},
		{"cni args", `{"type":"airlock-cni"}`, map[string]string{EnabledArg: "true"}, true},
		{"cni args not true", `{"type":"airlock-cni"}`, map[string]string{EnabledArg: "1"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tc.src))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Selected(tc.args); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPodAndLabels(t *testing.T) {
	c, err := ParseConfig([]byte(`{"type":"airlock-cni","args":{"cni":{"serviceAccount":"runner","labels":{"team":"ml"}}},
		"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"labels.airlock.dev/tier":"prod","airlock.dev/enabled":"true"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	pod, err := c.Pod(map[string]string{argPodNamespace: "ci", argPodName: "agent-0", argPodUID: "u-1"})
	want := api.Pod{Namespace: "ci", Name: "agent-0", UID: "u-1", ServiceAccount: "runner"}
	if err != nil || pod == nil || *pod != want {
		t.Fatalf("pod: got %+v, %v; want %+v", pod, err, want)
	}
	labels, err := c.Labels()
	if err != nil || len(labels) != 2 || labels["team"] != "ml" || labels["tier"] != "prod" {
		t.Fatalf("labels: got %v, %v; want team=ml and the annotation's tier=prod", labels, err)
	}

	bare, _ := ParseConfig([]byte(`{"type":"airlock-cni"}`))
	if pod, err := bare.Pod(map[string]string{}); pod != nil || err != nil {
		t.Errorf("no identity: got %+v, %v; want nil, nil", pod, err)
	}
	if labels, err := bare.Labels(); labels != nil || err != nil {
		t.Errorf("no labels: got %v, %v; want nil, nil", labels, err)
	}
	if _, err := bare.Pod(map[string]string{argPodName: strings.Repeat("a", api.MaxPodField+1)}); err == nil || !strings.Contains(err.Error(), argPodName) {
		t.Errorf("long pod name: got %v, want an error naming %s", err, argPodName)
	}
	if _, err := bare.Pod(map[string]string{argPodNamespace: "ci\nx"}); err == nil || !strings.Contains(err.Error(), argPodNamespace) {
		t.Errorf("control character: got %v, want an error naming %s", err, argPodNamespace)
	}
	// A pod's own annotation cannot relabel what the node's args.cni says:
	// team=web from the conflist stays, the pod's claim to team=ml fails ADD.
	relabel, _ := ParseConfig([]byte(`{"type":"airlock-cni","args":{"cni":{"labels":{"team":"web"}}},
		"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"labels.airlock.dev/team":"ml"}}}`))
	if labels, err := relabel.Labels(); err == nil || !strings.Contains(err.Error(), `label "team" is set by args.cni.labels`) {
		t.Errorf("annotation over args.cni.labels: got %v, %v; want an error naming the label", labels, err)
	}
	empty, _ := ParseConfig([]byte(`{"type":"airlock-cni","runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"labels.airlock.dev/":"x"}}}`))
	if _, err := empty.Labels(); err == nil || !strings.Contains(err.Error(), "names no label") {
		t.Errorf("empty label name: got %v", err)
	}
}
