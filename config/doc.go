// Package config owns airlock's one YAML configuration schema, shared by
// `airlock run`, `airlock serve` and `airlock attach`. It decodes strictly (an
// unknown field is an error naming it), applies defaults, validates every
// field with an error that names the field and the allowed values, and parses
// the human units the file uses (sizes like 512M or 100MB, durations like 30s,
// free space like 256M or 5%).
//
// Entry points: Load, Decode, Default. config holds data only: package daemon
// maps it onto each package's own Config (docs/ARCHITECTURE.md, "Daemon and
// command line"). The keys are documented in docs/CONFIG.md.
//
// config must never import: any other airlock package.
package config
