// Package openapi embeds the OpenAPI documents of the REST routes, so each
// service can serve them: the v2 (Swagger) document protoc-gen-openapiv2
// merges from every proto in proto/, and its OpenAPI 3 conversion
// (internal/openapigen), from which package client is generated.
package openapi

import _ "embed"

// Document is the merged OpenAPI v2 (Swagger) JSON for every REST route.
//
//go:embed fabro.swagger.json
var Document []byte

// DocumentV3 is Document converted to OpenAPI 3.0.
//
//go:embed fabro.openapi.json
var DocumentV3 []byte
