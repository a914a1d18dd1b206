package secrets

import (
	"fmt"
	"io"
	"log/slog"
)

// Redacted is what every printing or encoding of a Value produces.
const Redacted = "[REDACTED]"

// Value holds a secret's bytes. Every way Go can print or encode it (String,
// GoString, every fmt verb, JSON, text, YAML, slog) yields [REDACTED]. The bytes
// sit behind a pointer so that a Value nested in an unexported struct field,
// which fmt prints by reflection without calling methods, shows an address and
// never the contents.
type Value struct {
	p *valueBox
}

type valueBox struct {
	b string
}

// NewValue wraps s. Exported for tests and for callers that build a Value from
// their own source; the injector builds its own.
func NewValue(s string) Value { return Value{p: &valueBox{b: s}} }

// IsZero reports whether v holds nothing.
func (v Value) IsZero() bool { return v.p == nil || v.p.b == "" }

// reveal returns the bytes. It is unexported on purpose: only this package
// renders a Value into a header.
func (v Value) reveal() string {
	if v.p == nil {
		return ""
	}
	return v.p.b
}

// String implements fmt.Stringer.
func (Value) String() string { return Redacted }

// GoString implements fmt.GoStringer (%#v).
func (Value) GoString() string { return Redacted }

// Format implements fmt.Formatter for every verb and flag.
func (Value) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, Redacted) }

// MarshalJSON implements json.Marshaler.
func (Value) MarshalJSON() ([]byte, error) { return []byte(`"` + Redacted + `"`), nil }

// MarshalText implements encoding.TextMarshaler.
func (Value) MarshalText() ([]byte, error) { return []byte(Redacted), nil }

// MarshalYAML implements yaml.Marshaler.
func (Value) MarshalYAML() (any, error) { return Redacted, nil }

// LogValue implements slog.LogValuer.
func (Value) LogValue() slog.Value { return slog.StringValue(Redacted) }

// GobEncode refuses: a Value is never serialized.
func (Value) GobEncode() ([]byte, error) {
	return nil, fmt.Errorf("secrets: a secret value is never encoded")
}
