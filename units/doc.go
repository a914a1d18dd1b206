// Package units owns the two value spellings the config file, the flags and
// the daemon API share: Size (512M, 1GiB) and Duration (30s, 10m), each with
// one parser for YAML, JSON, text and pflag, so the API's wire types need not
// import the config package.
//
// Entry points: Size, ParseSize, Duration.
//
// units must never import: any other airlock package.
package units
