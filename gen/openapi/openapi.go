// Package openapi embeds the OpenAPI v2 document that protoc-gen-openapiv2
// merges from every proto in proto/, so each service can serve it.
package openapi

import _ "embed"

// Document is the merged OpenAPI v2 (Swagger) JSON for every REST route.
//
//go:embed fabro.swagger.json
var Document []byte
