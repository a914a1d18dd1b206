package hostname

import "testing"

func TestBelowRegistrable(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"api.example.com", true},
		{"a.b.example.com", true},
		{"a.example.co.uk", true},
		{"x.foo.github.io", true},
		{"x.bucket.s3.amazonaws.com", true},
		{"ec2.amazonaws.com", true},
		{"example.com", false},
		{"example.co.uk", false},
		{"foo.github.io", false},
		{"github.io", false},
		{"co.uk", false},
		{"com", false},
		{"s3.amazonaws.com", false},
		{"bucket.s3.amazonaws.com", false},
		{"x.compute-1.amazonaws.com", false}, // a wildcard rule of the list
		{"localhost", false},
		{"corp.example", false}, // "example" is no TLD: the default rule "*" makes it one
		{"a.corp.example", true},
		{"xn--p1ai", false},
		{"xn--80ak6aa92e.xn--p1ai", false},
		{"www.xn--80ak6aa92e.xn--p1ai", true},
		{"192.0.2.1", false},
		{"2001:db8::1", false},
		{"", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := BelowRegistrable(tt.name); got != tt.want {
				t.Errorf("BelowRegistrable(%q): got %v, want %v", tt.name, got, tt.want)
			}
		})
	}
}

func TestWildcardBounded(t *testing.T) {
	tests := []struct {
		pattern string
		want    bool
	}{
		{"*.example.com", true},
		{"*.example.co.uk", true},
		{"*.foo.github.io", true},
		{"*.amazonaws.com", true}, // one label: amazon's own names
		{"*.x.bucket.s3.amazonaws.com", true},
		{"**.api.example.com", true},
		{"**.x.foo.github.io", true},
		{"*.com", false},
		{"**.com", false},
		{"*.co.uk", false},
		{"**.co.uk", false},
		{"*.github.io", false},
		{"**.github.io", false},
		{"**.foo.github.io", false},
		{"**.example.com", false},
		{"**.amazonaws.com", false},
		{"*.s3.amazonaws.com", false},
		{"**.s3.amazonaws.com", false},
		{"*.compute-1.amazonaws.com", false},
		{"**.compute-1.amazonaws.com", false},
		{"*.example", false},
		{"*.localhost", false},
		{"*.xn--p1ai", false},
		{"example.com", true},
		{"com", true}, // one host, whatever it is
		{"192.0.2.1", true},
		{"", false},
		{"*", false},
	}
	for _, tt := range tests {
		t.Run(tt.pattern, func(t *testing.T) {
			if got := WildcardBounded(tt.pattern); got != tt.want {
				t.Errorf("WildcardBounded(%q): got %v, want %v", tt.pattern, got, tt.want)
			}
		})
	}
}
