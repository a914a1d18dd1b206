package ipguard

import (
	"errors"
	"net/netip"
	"testing"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		name, addr string
		want       Class
	}{
		{"public v4", "93.184.216.34", ClassPublic},
		{"loopback", "127.0.0.1", ClassLoopback},
		{"loopback high", "127.255.1.2", ClassLoopback},
		{"unspecified", "0.0.0.0", ClassUnspecified},
		{"this network", "0.1.2.3", ClassUnspecified},
		{"rfc1918 10", "10.1.2.3", ClassPrivate},
		{"rfc1918 172", "172.31.255.1", ClassPrivate},
		{"not rfc1918 172.32", "172.32.0.1", ClassPublic},
		{"rfc1918 192", "192.168.1.1", ClassPrivate},
		{"cgnat", "100.64.0.1", ClassCGNAT},
		{"link local", "169.254.1.1", ClassLinkLocal},
		{"aws metadata", "169.254.169.254", ClassMetadata},
		{"ecs metadata", "169.254.170.2", ClassMetadata},
		{"alibaba metadata", "100.100.100.200", ClassMetadata},
		{"azure wire server", "168.63.129.16", ClassMetadata},
		{"multicast", "224.0.0.251", ClassMulticast},
		{"broadcast", "255.255.255.255", ClassBroadcast},
		{"reserved", "240.0.0.1", ClassReserved},
		{"benchmark", "198.18.0.10", ClassBenchmark},
		{"documentation", "192.0.2.1", ClassDocumentation},
		{"v6 loopback", "::1", ClassLoopback},
		{"v6 unspecified", "::", ClassUnspecified},
		{"v6 public", "2606:4700::1111", ClassPublic},
		{"v6 ula", "fd12::1", ClassUniqueLocal},
		{"v6 aws metadata", "fd00:ec2::254", ClassMetadata},
		{"v6 link local", "fe80::1", ClassLinkLocal},
		{"v6 multicast", "ff02::1", ClassMulticast},
		{"mapped loopback", "::ffff:127.0.0.1", ClassLoopback},
		{"mapped metadata", "::ffff:169.254.169.254", ClassMetadata},
		{"compat private", "::10.0.0.1", ClassPrivate},
		{"nat64 metadata", "64:ff9b::a9fe:a9fe", ClassMetadata},
		{"nat64 public", "64:ff9b::5db8:d822", ClassPublic},
		{"nat64 local-use loopback", "64:ff9b:1::7f00:1", ClassLoopback},
		{"6to4 private", "2002:0a00:0001::1", ClassPrivate},
		{"6to4 public", "2002:5db8:d822::1", ClassPublic},
		{"teredo", "2001:0:4136:e378:8000:63bf:3fff:fdd2", ClassTunnel},
		{"documentation v6", "2001:db8::1", ClassDocumentation},
		{"outside global unicast", "4000::1", ClassReserved},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Classify(netip.MustParseAddr(tt.addr)); got != tt.want {
				t.Fatalf("Classify(%s) = %s, want %s", tt.addr, got, tt.want)
			}
		})
	}
}

func TestGuard(t *testing.T) {
	allow, err := ParsePrefixes("upstream.allow_cidrs", []string{"198.18.0.0/15", "10.9.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	g := New(allow, []netip.Addr{netip.MustParseAddr("198.18.0.1")})
	tests := []struct {
		name, addr string
		ok         bool
		class      Class
	}{
		{"public", "93.184.216.34", true, ""},
		{"allowed benchmark", "198.18.0.10", true, ""},
		{"allowed private", "10.9.1.1", true, ""},
		{"other private", "10.8.1.1", false, ClassPrivate},
		{"own inside allowed", "198.18.0.1", false, ClassOwn},
		{"own mapped", "::ffff:198.18.0.1", false, ClassOwn},
		{"metadata", "169.254.169.254", false, ClassMetadata},
		{"mapped allowed", "::ffff:198.18.0.10", true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := g.Check(netip.MustParseAddr(tt.addr))
			if tt.ok {
				if err != nil {
					t.Fatalf("Check(%s) = %v, want nil", tt.addr, err)
				}
				return
			}
			var be *BlockedError
			if !errors.As(err, &be) || be.Class != tt.class {
				t.Fatalf("Check(%s) = %v, want class %s", tt.addr, err, tt.class)
			}
		})
	}
	if err := g.Check(netip.Addr{}); err == nil {
		t.Fatal("zero address allowed")
	}
	if _, err := ParsePrefixes("upstream.allow_cidrs", []string{"nonsense"}); err == nil {
		t.Fatal("bad CIDR accepted")
	}
}

func BenchmarkCheckPublic(b *testing.B) {
	g := New(nil, nil)
	a := netip.MustParseAddr("93.184.216.34")
	for b.Loop() {
		_ = g.Check(a)
	}
}
