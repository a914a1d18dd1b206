package api

import "embed"

//go:embed openapi.json
var docFS embed.FS

// OpenAPI returns the OpenAPI 3 description of the daemon's API (checked in
// as api/openapi.json, served at GET /v1/openapi.json).
func OpenAPI() []byte {
	b, err := docFS.ReadFile("openapi.json")
	if err != nil {
		panic("api: openapi.json is not embedded: " + err.Error())
	}
	return b
}
