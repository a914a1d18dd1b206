package hostname

import (
	"errors"
	"strings"
	"testing"
)

func TestNormalize(t *testing.T) {
	tests := []struct {
		name, in, want string
		wantErr        bool
	}{
		{name: "plain", in: "pypi.org", want: "pypi.org"},
		{name: "upper", in: "PyPI.ORG", want: "pypi.org"},
		{name: "trailing dot", in: "pypi.org.", want: "pypi.org"},
		{name: "two trailing dots", in: "pypi.org..", wantErr: true},
		{name: "idna", in: "bücher.example", want: "xn--bcher-kva.example"},
		{name: "punycode kept", in: "xn--bcher-kva.example", want: "xn--bcher-kva.example"},
		{name: "fullwidth dot", in: "pypi。org", want: "pypi.org"},
		{name: "fullwidth letters", in: "ｐｙｐｉ.org", want: "pypi.org"},
		{name: "empty", in: "", wantErr: true},
		{name: "only dot", in: ".", wantErr: true},
		{name: "empty label", in: "a..b", wantErr: true},
		{name: "leading dot", in: ".pypi.org", wantErr: true},
		{name: "nul", in: "pypi.org\x00.evil.com", wantErr: true},
		{name: "percent escape", in: "pypi%2eorg", wantErr: true},
		{name: "backslash", in: "pypi.org\\@evil.com", wantErr: true},
		{name: "space", in: "pypi .org", wantErr: true},
		{name: "at sign", in: "user@pypi.org", wantErr: true},
		{name: "underscore", in: "a_b.example", wantErr: true},
		{name: "star", in: "*.example", wantErr: true},
		{name: "hyphen start", in: "-a.example", wantErr: true},
		{name: "hyphen end", in: "a-.example", wantErr: true},
		{name: "label 63", in: strings.Repeat("a", 63) + ".com", want: strings.Repeat("a", 63) + ".com"},
		{name: "label 64", in: strings.Repeat("a", 64) + ".com", wantErr: true},
		{name: "name 253", in: strings.Repeat("a.", 126) + "a", want: strings.Repeat("a.", 126) + "a"},
		{name: "name 255", in: strings.Repeat("a.", 127) + "a", wantErr: true},
		{name: "numeric tld", in: "1.2.3.4.5", wantErr: true},
		{name: "hex tld", in: "a.0x10", wantErr: true},
		{name: "ipv4", in: "127.0.0.1", want: "127.0.0.1"},
		{name: "ipv4 trailing dot", in: "127.0.0.1.", want: "127.0.0.1"},
		{name: "decimal integer", in: "2130706433", want: "127.0.0.1"},
		{name: "hex integer", in: "0x7f000001", want: "127.0.0.1"},
		{name: "octal", in: "0177.0.0.1", want: "127.0.0.1"},
		{name: "short form", in: "127.1", want: "127.0.0.1"},
		{name: "hex dotted", in: "0xa9.0xfe.0xa9.0xfe", want: "169.254.169.254"},
		{name: "three part", in: "169.254.43518", want: "169.254.169.254"},
		{name: "fullwidth digits", in: "１２７.０.０.１", want: "127.0.0.1"},
		{name: "octet overflow", in: "256.0.0.1", wantErr: true},
		{name: "integer overflow", in: "4294967296", wantErr: true},
		{name: "bracketed v6", in: "[::1]", want: "::1"},
		{name: "bare v6", in: "2001:DB8::1", want: "2001:db8::1"},
		{name: "mapped v6", in: "[::ffff:169.254.169.254]", want: "169.254.169.254"},
		{name: "mapped hex v6", in: "[::ffff:a9fe:a9fe]", want: "169.254.169.254"},
		{name: "zone", in: "[fe80::1%eth0]", wantErr: true},
		{name: "unterminated", in: "[::1", wantErr: true},
		{name: "port is not host", in: "pypi.org:443", wantErr: true},
		{name: "too long input", in: strings.Repeat("a", 2000), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Normalize(tt.in)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("Normalize(%q) = %q, want error", tt.in, got)
				}
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("error %v does not match ErrInvalid", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Normalize(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("Normalize(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestSuffixes(t *testing.T) {
	tests := []struct {
		name, in string
		want     []string
	}{
		{name: "three labels", in: "a.pypi.org", want: []string{"a.pypi.org", "pypi.org", "org"}},
		{name: "one label", in: "localhost", want: []string{"localhost"}},
		{name: "ip", in: "10.0.0.1", want: []string{"10.0.0.1"}},
		{name: "empty", in: "", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Suffixes(tt.in)
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSplitHostPort(t *testing.T) {
	tests := []struct {
		name, in string
		def      int
		host     string
		port     int
		wantErr  bool
	}{
		{name: "host port", in: "PyPI.org:443", def: 80, host: "pypi.org", port: 443},
		{name: "default", in: "pypi.org", def: 80, host: "pypi.org", port: 80},
		{name: "v6 port", in: "[::1]:8080", def: 80, host: "::1", port: 8080},
		{name: "v6 bare", in: "[2001:db8::1]", def: 443, host: "2001:db8::1", port: 443},
		{name: "int ip", in: "2130706433:80", def: 443, host: "127.0.0.1", port: 80},
		{name: "empty port", in: "pypi.org:", def: 80, wantErr: true},
		{name: "port zero", in: "pypi.org:0", def: 80, wantErr: true},
		{name: "port big", in: "pypi.org:65536", def: 80, wantErr: true},
		{name: "signed port", in: "pypi.org:+443", def: 80, wantErr: true},
		{name: "no default", in: "pypi.org", def: 0, wantErr: true},
		{name: "junk after v6", in: "[::1]x", def: 80, wantErr: true},
		{name: "bad host", in: "a..b:80", def: 80, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, p, err := SplitHostPort(tt.in, tt.def)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("SplitHostPort(%q) = %q %d, want error", tt.in, h, p)
				}
				return
			}
			if err != nil || h != tt.host || p != tt.port {
				t.Fatalf("SplitHostPort(%q) = %q %d %v, want %q %d", tt.in, h, p, err, tt.host, tt.port)
			}
		})
	}
}

func TestPatterns(t *testing.T) {
	tests := []struct {
		name, pattern, host string
		want                bool
	}{
		{name: "exact", pattern: "pypi.org", host: "pypi.org", want: true},
		{name: "exact other", pattern: "pypi.org", host: "x.pypi.org", want: false},
		{name: "one label", pattern: "*.pypi.org", host: "a.pypi.org", want: true},
		{name: "one label not two", pattern: "*.pypi.org", host: "a.b.pypi.org", want: false},
		{name: "one label not apex", pattern: "*.pypi.org", host: "pypi.org", want: false},
		{name: "suffix trick", pattern: "*.pypi.org", host: "evilpypi.org", want: false},
		{name: "many labels", pattern: "**.pypi.org", host: "a.b.pypi.org", want: true},
		{name: "many not apex", pattern: "**.pypi.org", host: "pypi.org", want: false},
		{name: "many suffix trick", pattern: "**.pypi.org", host: "evilpypi.org", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NormalizePattern(tt.pattern)
			if err != nil {
				t.Fatal(err)
			}
			if got := MatchPattern(p, tt.host); got != tt.want {
				t.Fatalf("MatchPattern(%q, %q) = %v, want %v", p, tt.host, got, tt.want)
			}
		})
	}
	if _, err := NormalizePattern("*.10.0.0.1"); err == nil {
		t.Fatal("wildcard on an IP accepted")
	}
}

func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"pypi.org", "PyPI.org.", "2130706433", "[::ffff:1.2.3.4]", "bücher.de", "a..b", "0x7f.1", "xn--", "ｐｙｐｉ。org"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out, err := Normalize(s)
		if err != nil {
			return
		}
		again, err := Normalize(out)
		if err != nil || again != out {
			t.Fatalf("not idempotent: %q -> %q -> %q (%v)", s, out, again, err)
		}
		if _, isIP := ParseIP(out); isIP {
			return
		}
		if len(out) > MaxNameLength {
			t.Fatalf("%q -> %q longer than %d", s, out, MaxNameLength)
		}
		for i := 0; i < len(out); i++ {
			c := out[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
				t.Fatalf("%q -> %q has byte %q", s, out, c)
			}
		}
	})
}

func FuzzSplitHostPort(f *testing.F) {
	for _, s := range []string{"pypi.org:443", "[::1]:80", "a:b:c", "[::1", "x:0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, p, err := SplitHostPort(s, 443)
		if err != nil {
			return
		}
		if p < 1 || p > 65535 {
			t.Fatalf("port %d out of range for %q", p, s)
		}
		h2, p2, err := SplitHostPort(JoinHostPort(h, p), 1)
		if err != nil || h2 != h || p2 != p {
			t.Fatalf("round trip %q -> %q %d -> %q %d %v", s, h, p, h2, p2, err)
		}
	})
}

func TestNormalizeAllocs(t *testing.T) {
	// Regression: ParseIP split every name into a slice, three allocations per
	// DNS question and request before anything was decided.
	if n := testing.AllocsPerRun(100, func() { _, _ = Normalize("files.pythonhosted.org") }); n != 0 {
		t.Fatalf("Normalize of a canonical name allocates %v times, want 0", n)
	}
}

func BenchmarkNormalize(b *testing.B) {
	for _, in := range []string{"files.pythonhosted.org", "PyPI.org.", "bücher.example", "2130706433"} {
		b.Run(in, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = Normalize(in)
			}
		})
	}
}
