// Package config owns airlock's one YAML configuration schema, shared by
// `airlock run` and `airlock serve` (DESIGN.md section 7). It decodes strictly
// (an unknown field is an error naming it), applies defaults, validates every
// field with an error that names the field and the allowed values, and parses
// the human units the file uses (sizes like 512M or 100MB, durations like 30s).
//
// config holds data only. It must never import gateway, dnsfilter, netns,
// sandboxd, secrets or audit: cmd/airlock maps it onto their Configs.
package config
