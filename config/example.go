package config

import (
	"bytes"
	_ "embed" // the example file
)

//go:embed airlock.example.yaml
var example []byte

// Example returns the commented example file (airlock.example.yaml in this
// package): every key with its default value and what it does. `airlock
// config example` prints it; a test keeps it equal to Default and complete.
func Example() []byte { return bytes.Clone(example) }
