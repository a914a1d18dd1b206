package deploy

import (
	"errors"
	"fmt"
	"regexp"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// serviceMonitor mirrors the part of monitoring.coreos.com/v1 ServiceMonitor
// (Prometheus Operator's CRD) the deployment uses. There is no k8s.io/api
// type for it; decoding strictly into this struct fails on any field the
// deployment sets that the mirror does not know, and checkServiceMonitor
// checks the values against the CRD's schema (duration pattern, endpoint
// port by name).
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              serviceMonitorSpec `json:"spec"`
}

type serviceMonitorSpec struct {
	Selector          metav1.LabelSelector `json:"selector"`
	NamespaceSelector struct {
		Any        bool     `json:"any,omitempty"`
		MatchNames []string `json:"matchNames,omitempty"`
	} `json:"namespaceSelector"`
	Endpoints []smEndpoint `json:"endpoints"`
}

type smEndpoint struct {
	Port        string         `json:"port"`
	Path        string         `json:"path,omitempty"`
	Scheme      string         `json:"scheme,omitempty"`
	Interval    string         `json:"interval,omitempty"`
	Relabelings []smRelabeling `json:"relabelings,omitempty"`
}

type smRelabeling struct {
	SourceLabels []string `json:"sourceLabels,omitempty"`
	TargetLabel  string   `json:"targetLabel,omitempty"`
	Regex        string   `json:"regex,omitempty"`
	Replacement  *string  `json:"replacement,omitempty"`
	Action       string   `json:"action,omitempty"`
}

// promDuration is the CRD's pattern for monitoring.coreos.com Duration.
var promDuration = regexp.MustCompile(`^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$`)

// objects are a deployment's decoded objects, by kind (one of each but
// namespaces).
type objects struct {
	namespaces     []*corev1.Namespace
	configMap      *corev1.ConfigMap
	secret         *corev1.Secret
	service        *corev1.Service
	daemonSet      *appsv1.DaemonSet
	serviceMonitor *serviceMonitor
}

// decodeInto decodes one YAML document the way the API server's strict
// field validation does (sigs.k8s.io/json): field names match case
// sensitively, and an unknown or duplicate field is an error.
func decodeInto(t reporter, source string, body []byte, into any) {
	t.Helper()
	j, err := yaml.YAMLToJSONStrict(body)
	if err != nil {
		t.Fatalf("%s: %v", source, err)
	}
	strict, err := kjson.UnmarshalStrict(j, into, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		t.Fatalf("%s: decode into %T: %v", source, into, err)
	}
	if len(strict) > 0 {
		t.Fatalf("%s: strict decode into %T: %v", source, into, errors.Join(strict...))
	}
}

// decodeAll decodes every document into its k8s.io/api type (or the
// ServiceMonitor mirror) strictly and checks the metadata every object
// needs.
func decodeAll(t reporter, docs []manifest) objects {
	t.Helper()
	var o objects
	once := func(source, kind string, set bool) {
		if set {
			t.Fatalf("%s: a second %s", source, kind)
		}
	}
	for _, m := range docs {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(m.body, &tm); err != nil {
			t.Fatalf("%s: %v", m.source, err)
		}
		var meta *metav1.ObjectMeta
		switch gvk := tm.APIVersion + " " + tm.Kind; gvk {
		case "v1 Namespace":
			ns := &corev1.Namespace{}
			decodeInto(t, m.source, m.body, ns)
			o.namespaces, meta = append(o.namespaces, ns), &ns.ObjectMeta
		case "v1 ConfigMap":
			once(m.source, tm.Kind, o.configMap != nil)
			o.configMap = &corev1.ConfigMap{}
			decodeInto(t, m.source, m.body, o.configMap)
			meta = &o.configMap.ObjectMeta
		case "v1 Secret":
			once(m.source, tm.Kind, o.secret != nil)
			o.secret = &corev1.Secret{}
			decodeInto(t, m.source, m.body, o.secret)
			meta = &o.secret.ObjectMeta
		case "v1 Service":
			once(m.source, tm.Kind, o.service != nil)
			o.service = &corev1.Service{}
			decodeInto(t, m.source, m.body, o.service)
			meta = &o.service.ObjectMeta
		case "apps/v1 DaemonSet":
			once(m.source, tm.Kind, o.daemonSet != nil)
			o.daemonSet = &appsv1.DaemonSet{}
			decodeInto(t, m.source, m.body, o.daemonSet)
			meta = &o.daemonSet.ObjectMeta
		case "monitoring.coreos.com/v1 ServiceMonitor":
			once(m.source, tm.Kind, o.serviceMonitor != nil)
			o.serviceMonitor = &serviceMonitor{}
			decodeInto(t, m.source, m.body, o.serviceMonitor)
			meta = &o.serviceMonitor.ObjectMeta
		default:
			t.Fatalf("%s: unexpected object %q", m.source, gvk)
		}
		if err := checkMeta(meta, tm.Kind == "Namespace"); err != nil {
			t.Errorf("%s: %s: %v", m.source, tm.Kind, err)
		}
	}
	return o
}

// checkMeta checks what the API server would: DNS names, label keys and
// values, and a namespace on every namespaced object.
func checkMeta(m *metav1.ObjectMeta, clusterScoped bool) error {
	if errs := validation.IsDNS1123Subdomain(m.Name); len(errs) > 0 {
		return fmt.Errorf("name %q: %v", m.Name, errs)
	}
	if !clusterScoped {
		if errs := validation.IsDNS1123Label(m.Namespace); len(errs) > 0 {
			return fmt.Errorf("namespace %q: %v", m.Namespace, errs)
		}
	}
	for k, v := range m.Labels {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("label key %q: %v", k, errs)
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return fmt.Errorf("label %s value %q: %v", k, v, errs)
		}
	}
	return nil
}

// reporter is what the checks report through: *testing.T, or a collector
// when a test expects a check to fail.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

var _ reporter = (*testing.T)(nil)

// collector gathers a check's failures; Fatalf stops the check.
type collector struct{ errs []string }

type stopCheck struct{}

func (c *collector) Helper() {}

func (c *collector) Errorf(format string, args ...any) {
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}

func (c *collector) Fatalf(format string, args ...any) {
	c.Errorf(format, args...)
	panic(stopCheck{})
}

// failures runs check and returns what it reported.
func failures(check func(r reporter)) (errs []string) {
	c := &collector{}
	defer func() {
		if v := recover(); v != nil {
			if _, ok := v.(stopCheck); !ok {
				panic(v)
			}
		}
		errs = c.errs
	}()
	check(c)
	return c.errs
}
