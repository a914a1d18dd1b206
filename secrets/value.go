package secrets

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/airlock-dev/airlock/audit"
)

// Value holds a secret's bytes. Every way Go can print or encode it (String,
// GoString, every fmt verb, JSON, text, YAML, slog) yields audit.Redacted,
// "[REDACTED]", as the audit log and the scrubber spell it. The bytes
// live in a closure: a Value nested in an unexported struct field, which fmt
// prints by reflection without calling methods (and dereferences pointers when
// it reports a bad verb), shows a function address and never the contents.
type Value struct {
	get func() string
}

// newValue wraps s.
func newValue(s string) Value { return Value{get: func() string { return s }} }

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
func (Value) String() string { return audit.Redacted }

// GoString implements fmt.GoStringer (%#v).
func (Value) GoString() string { return audit.Redacted }

// Format implements fmt.Formatter for every verb and flag.
func (Value) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, audit.Redacted) }

// MarshalJSON implements json.Marshaler.
func (Value) MarshalJSON() ([]byte, error) { return []byte(`"` + audit.Redacted + `"`), nil }

// MarshalText implements encoding.TextMarshaler.
func (Value) MarshalText() ([]byte, error) { return []byte(audit.Redacted), nil }

// MarshalYAML implements yaml.Marshaler.
func (Value) MarshalYAML() (any, error) { return audit.Redacted, nil }

// LogValue implements slog.LogValuer.
func (Value) LogValue() slog.Value { return slog.StringValue(audit.Redacted) }

// GobEncode refuses: a Value is never serialized.
func (Value) GobEncode() ([]byte, error) {
	return nil, fmt.Errorf("secrets: a secret value is never encoded")
}
