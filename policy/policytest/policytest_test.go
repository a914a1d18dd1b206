package policytest

import (
	"context"
	"testing"

	"github.com/airlock-dev/airlock/hostname"
	"github.com/airlock-dev/airlock/policy"
)

func input(kind policy.Kind, host, path string) *policy.Input {
	in := &policy.Input{Kind: kind, Destination: policy.Destination{Host: host, Port: 443, Suffixes: hostname.Suffixes(host)}}
	if path != "" {
		in.HTTP = &policy.HTTP{Method: "GET", Path: path}
	}
	return in
}

func TestDecider(t *testing.T) {
	d := Allow("pypi.org", "mitm.example").Intercept("mitm.example").DenyPaths("/secret").AllowUnder("example.com")
	d.DenyIf(func(in *policy.Input) bool { return in.Destination.Host == "pypi.org" && in.Kind == policy.KindTCP })
	tests := []struct {
		name       string
		in         *policy.Input
		wantAllow  bool
		wantMITM   bool
		wantReason string
	}{
		{"allowed host", input(policy.KindHTTP, "pypi.org", "/simple/"), true, false, ""},
		{"not a subdomain of an exact host", input(policy.KindHTTP, "files.pypi.org", ""), false, false, ReasonNotAllowed},
		{"under an allowed domain", input(policy.KindConnect, "api.example.com", ""), true, false, ""},
		{"intercepted", input(policy.KindConnect, "mitm.example", ""), true, true, ""},
		{"denied path", input(policy.KindHTTP, "pypi.org", "/secret"), false, false, ReasonPathDenied},
		{"deny if", input(policy.KindTCP, "pypi.org", ""), false, false, ReasonDenied},
		{"other host", input(policy.KindTLS, "evil.example", ""), false, false, ReasonNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := d.Decide(context.Background(), tt.in)
			reason := ""
			if len(got.Reasons) > 0 {
				reason = got.Reasons[0].ID
			}
			if got.Allowed != tt.wantAllow || got.MITM != tt.wantMITM || reason != tt.wantReason || got.Rev != Rev || got.Mode != policy.ModeEnforce {
				t.Errorf("got %+v, want allowed %v mitm %v reason %q rev %s enforce", got, tt.wantAllow, tt.wantMITM, tt.wantReason, Rev)
			}
		})
	}
	if got := len(d.Inputs()); got != len(tests) {
		t.Errorf("inputs recorded: got %d, want %d", got, len(tests))
	}
}

func TestDeciderModeRevAmendAndInputs(t *testing.T) {
	d := AllowUnder("pypi.org")
	d.SetMode(policy.ModeReport)
	d.SetRev("rev-2")
	d.Amend(func(_ *policy.Input, dec *policy.Decision) { dec.HTTPStatus = 418 })
	in := input(policy.KindDNS, "files.pypi.org", "")
	in.DNS = &policy.DNS{QName: "files.pypi.org", QType: "A", Flags: []string{"x"}}
	got := d.Decide(context.Background(), in)
	in.DNS.Flags[0] = "changed"
	if !got.Allowed || got.Mode != policy.ModeReport || got.Rev != "rev-2" || d.Rev() != "rev-2" || got.HTTPStatus != 418 {
		t.Errorf("got %+v (Rev() %s), want an allow in report mode, rev-2, amended", got, d.Rev())
	}
	if flags := d.Inputs()[0].DNS.Flags; flags[0] != "x" {
		t.Errorf("recorded flags: got %v, want the flags as decided", flags)
	}
}

func TestFailingDenies(t *testing.T) {
	got := Failing("eval failed").Decide(context.Background(), input(policy.KindHTTP, "pypi.org", "/"))
	if got.Err == nil || got.Permit() || len(got.Reasons) != 1 || got.Reasons[0].ID != policy.ReasonPolicyError {
		t.Errorf("got %+v, want a policy error that is not permitted", got)
	}
}
