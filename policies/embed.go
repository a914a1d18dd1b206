package policies

import "embed"

// FS is the embedded policy tree: lib/, default/, presets/, schema/, examples/.
//
//go:embed lib default presets schema examples
var FS embed.FS
