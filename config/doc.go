// Package config owns airlock's one YAML configuration schema, shared by
// `airlock run`, `airlock serve` and `airlock attach`. It decodes strictly (an
// unknown field is an error naming it), applies defaults, validates every
// field with an error that names the field and the allowed values, and parses
// the human units the file uses (sizes and durations: package units; free
// space like 256M or 5%: values.go). Each section is one file with its type,
// its Default* constants, applyDefaults and validate (policy.go, dns.go,
// upstream.go, audit.go, ca.go, secrets.go, limits.go, sandbox.go, api.go,
// metrics.go); config.go decodes and calls them in order.
//
// Entry points: Load, Decode, Default. config holds data only: package daemon
// maps it onto each package's own Config (daemon/build.go). The keys are documented in README.md.
//
// config must never import: any other airlock package but hostname, units.
package config
