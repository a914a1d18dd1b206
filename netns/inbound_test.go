package netns

import (
	"strings"
	"testing"
)

func TestInboundValidate(t *testing.T) {
	tests := []struct {
		name    string
		in      Inbound
		wantErr string // "" for valid
	}{
		{"zero is capture", Inbound{}, ""},
		{"capture", Inbound{Mode: InboundCapture}, ""},
		{"accept all ports", Inbound{Mode: InboundAccept}, ""},
		{"accept ports", Inbound{Mode: InboundAccept, Ports: []int{8080, 443}}, ""},
		{"unknown mode", Inbound{Mode: "open"}, `inbound.mode: "open" is not "capture" or "accept"`},
		{"ports with capture", Inbound{Mode: InboundCapture, Ports: []int{80}}, "inbound.ports: only with inbound.mode \"accept\""},
		{"ports with no mode", Inbound{Ports: []int{80}}, "inbound.ports: only with inbound.mode \"accept\""},
		{"port 0", Inbound{Mode: InboundAccept, Ports: []int{80, 0}}, "inbound.ports[1]: 0 is not a TCP port (1-65535)"},
		{"port too big", Inbound{Mode: InboundAccept, Ports: []int{65536}}, "inbound.ports[0]: 65536 is not a TCP port"},
		{"negative port", Inbound{Mode: InboundAccept, Ports: []int{-1}}, "inbound.ports[0]: -1 is not a TCP port"},
		{"duplicate", Inbound{Mode: InboundAccept, Ports: []int{80, 81, 80}}, "inbound.ports[2]: port 80 given twice"},
		{"too many", Inbound{Mode: InboundAccept, Ports: make([]int, MaxInboundPorts+1)}, "inbound.ports: 33 ports, at most 32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.in.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate(%+v) = %v, want nil", tt.in, err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Validate(%+v) = %v, want an error containing %q", tt.in, err, tt.wantErr)
			}
		})
	}
}

func TestInboundString(t *testing.T) {
	for _, tt := range []struct {
		in   Inbound
		want string
	}{
		{Inbound{}, "capture"},
		{Inbound{Mode: InboundAccept}, "accept all TCP ports"},
		{Inbound{Mode: InboundAccept, Ports: []int{8443, 80}}, "accept TCP 80,8443"},
	} {
		if got := tt.in.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestRulesAttachInbound pins the rules of both inbound modes. Capture sends
// what arrives to the listeners (a VM's egress); accept lets in only new TCP
// connections to the namespace's own addresses on the listed ports, lets out
// only their replies, and never sends arriving traffic to the listeners (the
// pod's gateway is not the network's).
func TestRulesAttachInbound(t *testing.T) {
	base := ruleSpec{DNSPort: 5353, TransparentPort: 15001, NFLogGroup: 7, Attach: true}
	capture := base.render()
	accept := func(ports ...int) string {
		s := base
		s.Inbound = Inbound{Mode: InboundAccept, Ports: ports}
		return s.render()
	}
	if zero, explicit := capture, func() string { s := base; s.Inbound = Inbound{Mode: InboundCapture}; return s.render() }(); zero != explicit {
		t.Errorf("the zero Inbound renders differently from capture:\n%s\nvs\n%s", zero, explicit)
	}
	toListeners := []string{
		"-A AIRLOCK-NAT-PRE -p udp --dport 53 -j DNAT --to-destination 127.0.0.1:5353",
		"-A AIRLOCK-NAT-PRE -p tcp --dport 53 -j DNAT --to-destination 127.0.0.1:5353",
		"-A AIRLOCK-NAT-PRE -p tcp -j DNAT --to-destination 127.0.0.1:15001",
		"-A AIRLOCK-IN -d 127.0.0.1/32 -p tcp --dport 15001 -m conntrack --ctstate DNAT -j ACCEPT",
	}
	tests := []struct {
		name      string
		rules     string
		want, not []string
	}{
		{"capture", capture, toListeners, []string{"airlock-inbound", "--ctstate ESTABLISHED"}},
		{"accept listed ports", accept(8443, 8080), []string{
			"-A AIRLOCK-NAT-PRE -i lo -j RETURN",
			"-A AIRLOCK-NAT-PRE -p tcp ! -d 127.0.0.0/8 -m tcp --dport 8080 --syn -m addrtype --dst-type LOCAL -j RETURN",
			"-A AIRLOCK-NAT-PRE -p tcp ! -d 127.0.0.0/8 -m tcp --dport 8443 --syn -m addrtype --dst-type LOCAL -j RETURN",
			"-A AIRLOCK-NAT-PRE -j NFLOG --nflog-group 7 --nflog-prefix airlock-in --nflog-size 128",
			"-A AIRLOCK-IN -p tcp ! -d 127.0.0.0/8 -m tcp --dport 8080 -m addrtype --dst-type LOCAL -m conntrack --ctstate ESTABLISHED --ctdir ORIGINAL -j ACCEPT",
			"-A AIRLOCK-IN -p tcp ! -d 127.0.0.0/8 -m tcp --dport 8080 --syn -m addrtype --dst-type LOCAL -m conntrack --ctstate NEW -j NFLOG --nflog-group 7 --nflog-prefix airlock-inbound --nflog-size 128",
			"-A AIRLOCK-IN -p tcp ! -d 127.0.0.0/8 -m tcp --dport 8080 --syn -m addrtype --dst-type LOCAL -m conntrack --ctstate NEW -j ACCEPT",
			"-A AIRLOCK-IN -p tcp ! -d 127.0.0.0/8 -m tcp --dport 8443 --syn -m addrtype --dst-type LOCAL -m conntrack --ctstate NEW -j ACCEPT",
			"-A AIRLOCK-IN -j DROP",
			"-A AIRLOCK-OUT -p tcp ! -s 127.0.0.0/8 -m tcp --sport 8080 -m addrtype --src-type LOCAL -m conntrack --ctstate ESTABLISHED --ctdir REPLY -j ACCEPT",
			"-A AIRLOCK-OUT -p tcp ! -s 127.0.0.0/8 -m tcp --sport 8443 -m addrtype --src-type LOCAL -m conntrack --ctstate ESTABLISHED --ctdir REPLY -j ACCEPT",
			"-A AIRLOCK-FWD -j DROP",
			// The workload's own egress is captured exactly as in capture mode.
			"-A AIRLOCK-NAT-OUT -p tcp -j REDIRECT --to-ports 15001",
			"-A AIRLOCK-OUT -m conntrack --ctstate NEW -m hashlimit --hashlimit-above 500/sec --hashlimit-burst 2000 --hashlimit-name airlock-new -j DROP",
		}, append(toListeners, "--dport 8081", "--ctstate NEW -j ACCEPT\n-A AIRLOCK-OUT", "udp --dport 8080")},
		{"accept all ports", accept(), []string{
			"-A AIRLOCK-NAT-PRE -p tcp ! -d 127.0.0.0/8 -m tcp --syn -m addrtype --dst-type LOCAL -j RETURN",
			"-A AIRLOCK-IN -p tcp ! -d 127.0.0.0/8 -m addrtype --dst-type LOCAL -m conntrack --ctstate ESTABLISHED --ctdir ORIGINAL -j ACCEPT",
			"-A AIRLOCK-IN -p tcp ! -d 127.0.0.0/8 -m tcp --syn -m addrtype --dst-type LOCAL -m conntrack --ctstate NEW -j ACCEPT",
			"-A AIRLOCK-OUT -p tcp ! -s 127.0.0.0/8 -m addrtype --src-type LOCAL -m conntrack --ctstate ESTABLISHED --ctdir REPLY -j ACCEPT",
		}, append(toListeners, "--dport 8080")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, line := range tt.want {
				if !strings.Contains(tt.rules, line+"\n") {
					t.Errorf("rules lack %q:\n%s", line, tt.rules)
				}
			}
			for _, s := range tt.not {
				if strings.Contains(tt.rules, s) {
					t.Errorf("rules hold %q:\n%s", s, tt.rules)
				}
			}
			// The reply accept comes before the output chain's log and drop,
			// and nothing follows the input chain's drop.
			if i, j := strings.Index(tt.rules, "--ctdir REPLY -j ACCEPT\n-A AIRLOCK-OUT -p tcp"), strings.Index(tt.rules, "-A AIRLOCK-OUT -j DROP"); i > j {
				t.Errorf("a reply accept after the output chain's drop:\n%s", tt.rules)
			}
			if strings.Contains(tt.rules, "-A AIRLOCK-IN -j DROP\n-A AIRLOCK-IN") {
				t.Errorf("a rule after the input chain's drop:\n%s", tt.rules)
			}
		})
	}
}

// TestCheckChain pins what Verify (the CNI CHECK) notices in an airlock
// chain, with listings as iptables -S prints them.
func TestCheckChain(t *testing.T) {
	spec := ruleSpec{DNSPort: 53, TransparentPort: 15001, NFLogGroup: 100, Attach: true, Inbound: Inbound{Mode: InboundAccept, Ports: []int{8080}}}
	_, want := spec.chains()
	in := ownChain{"filter", chainIn}
	listed := []string{
		"-N AIRLOCK-IN",
		"-A AIRLOCK-IN -i lo -j RETURN",
		"-A AIRLOCK-IN ! -d 127.0.0.0/8 -p tcp -m tcp --dport 8080 -m addrtype --dst-type LOCAL -m conntrack --ctstate ESTABLISHED --ctdir ORIGINAL -j ACCEPT",
		"-A AIRLOCK-IN ! -d 127.0.0.0/8 -p tcp -m tcp --dport 8080 --tcp-flags FIN,SYN,RST,ACK SYN -m addrtype --dst-type LOCAL -m conntrack --ctstate NEW -j NFLOG --nflog-prefix airlock-inbound --nflog-group 100 --nflog-size 128",
		"-A AIRLOCK-IN ! -d 127.0.0.0/8 -p tcp -m tcp --dport 8080 --tcp-flags FIN,SYN,RST,ACK SYN -m addrtype --dst-type LOCAL -m conntrack --ctstate NEW -j ACCEPT",
		"-A AIRLOCK-IN -j DROP",
	}
	with := func(i int, line string) []string {
		l := append([]string(nil), listed...)
		l[i] = line
		return l
	}
	tests := []struct {
		name    string
		listing []string
		wantErr string
	}{
		{"as installed", listed, ""},
		{"another port", with(4, strings.Replace(listed[4], "8080", "22", 1)), "rule 4 is"},
		{"accept without the syn check", with(4, strings.Replace(listed[4], " --tcp-flags FIN,SYN,RST,ACK SYN", "", 1)), "rule 4 is"},
		{"accept of everything added", append(listed[:len(listed)-1:len(listed)-1], "-A AIRLOCK-IN -j ACCEPT", "-A AIRLOCK-IN -j DROP"), "rule 5 is"},
		{"drop removed", listed[:len(listed)-1], "has 4 rules, want 5"},
		{"capture rules instead", []string{
			"-A AIRLOCK-IN -i lo -j RETURN",
			"-A AIRLOCK-IN -d 127.0.0.1/32 -p tcp -m tcp --dport 15001 -m conntrack --ctstate DNAT -j ACCEPT",
			"-A AIRLOCK-IN -d 127.0.0.1/32 -p tcp -m tcp --dport 53 -m conntrack --ctstate DNAT -j ACCEPT",
			"-A AIRLOCK-IN -d 127.0.0.1/32 -p udp -m udp --dport 53 -m conntrack --ctstate DNAT -j ACCEPT",
			"-A AIRLOCK-IN -j DROP",
		}, "rule 2 is"},
		{"flushed", []string{"-N AIRLOCK-IN"}, "has 0 rules, want 5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkChain(in, want[in], tt.listing)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("checkChain = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("checkChain = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
	order, _ := spec.chains()
	if len(order) != 5 {
		t.Errorf("chains of an attached namespace: %v, want 5", order)
	}
}
