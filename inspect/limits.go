package inspect

import "errors"

// Limits bounds the protocol parsers. Zero values take the Default* values.
type Limits struct {
	MaxBytes  int // body bytes parsed; larger is an error
	MaxDepth  int // JSON nesting
	MaxItems  int // batch messages, parts, argument keys kept
	MaxString int // bytes kept of one string value
}

// Defaults of Limits.
const (
	DefaultParseBytes  = 4 << 20
	DefaultParseDepth  = 64
	DefaultParseItems  = 256
	DefaultParseString = 1024
)

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultParseBytes
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultParseDepth
	}
	if l.MaxItems <= 0 {
		l.MaxItems = DefaultParseItems
	}
	if l.MaxString <= 0 {
		l.MaxString = DefaultParseString
	}
	return l
}

// ErrMalformed wraps every parser refusal, so a caller tells malformed input
// (a finding) from a failure.
var ErrMalformed = errors.New("malformed")

// MalformedFinding is the finding a caller records for a parser error; the
// error itself (which may quote the input) belongs in the log, not in the
// finding.
func MalformedFinding(where string, err error) Finding {
	_ = err
	return Finding{Detector: DetectorMalformed, Class: ClassMalformed, Where: where, Confidence: High}
}
