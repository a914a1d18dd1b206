// Package policies holds airlock's Rego library, default policy, preset host
// lists and input schema, embedded into the binary so every command works with
// no files on disk. The examples/ directory is embedded too, for `airlock policy
// test` of this tree; examples are never loaded by the gateway unless a user
// copies one into their own policy directory. Package policy is the only reader,
// and this package must never import any airlock package: it is data.
package policies

import "embed"

// FS is the embedded policy tree: lib/, default/, presets/, schema/, examples/.
//
//go:embed lib default presets schema examples
var FS embed.FS
