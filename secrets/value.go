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
// live in a closure: a Value nested in an unexported struct field, which fmt
// prints by reflection without calling methods (and dereferences pointers when
// it reports a bad verb), shows a function address and never the contents.
type Value struct {
	get func() string
}

// NewValue wraps s. Exported for tests and for callers that build a Value from
// their own source; the injector builds its own.
func NewValue(s string) Value { return Value{get: func() string { return s }} }

// IsZero reports whether v holds nothing.
func (v Value) IsZero() bool { return v.get == nil || v.get() == "" }

// reveal returns the bytes. It is unexported on purpose: only this package
// renders a Value into a header.
func (v Value) reveal() string {
	if v.get == nil {
		return ""
	}
	return v.get()
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
