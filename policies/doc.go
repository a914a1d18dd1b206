// Package policies holds airlock's Rego library (lib/), default policy
// (default/), preset host lists (presets/) and input schema (schema/), embedded
// into the binary so every command works with no files on disk. The examples/
// directory is embedded too, for `airlock policy test` of this tree; examples
// are never loaded by the gateway unless a user copies one into their own
// policy directory.
//
// Entry point: FS. Package policy is its only reader. What the library and the
// default policy decide: policies/README.md and policy/DESIGN.md.
//
// policies must never import: any other airlock package.
package policies
