// Command openapigen converts the merged OpenAPI v2 document that
// protoc-gen-openapiv2 writes (gen/openapi/fabro.swagger.json) to OpenAPI 3
// (fabro.openapi.json, what oapi-codegen reads), and splits it into one
// OpenAPI 3 document per service (services/<Service>.openapi.json), each
// holding only its own routes and the schemas they reach. `make generate`
// runs it after buf generate; its output is committed.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/getkin/kin-openapi/openapi2"
	"github.com/getkin/kin-openapi/openapi2conv"
	"github.com/getkin/kin-openapi/openapi3"
)

func main() {
	dir := flag.String("dir", "gen/openapi", "directory holding fabro.swagger.json; the output goes there too")
	flag.Parse()
	if err := run(*dir); err != nil {
		fmt.Fprintln(os.Stderr, "openapigen:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	v2, err := os.ReadFile(filepath.Join(dir, "fabro.swagger.json"))
	if err != nil {
		return err
	}
	merged, err := convert(v2)
	if err != nil {
		return err
	}
	if err := write(filepath.Join(dir, "fabro.openapi.json"), merged); err != nil {
		return err
	}
	svcDir := filepath.Join(dir, "services")
	if err := os.RemoveAll(svcDir); err != nil {
		return err
	}
	if err := os.MkdirAll(svcDir, 0o755); err != nil {
		return err
	}
	for _, tag := range list(merged["tags"]) {
		t := obj(tag)
		name, _ := t["name"].(string)
		if name == "" {
			return fmt.Errorf("a tag without a name")
		}
		doc := perService(merged, t)
		if err := validate(doc); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := write(filepath.Join(svcDir, name+".openapi.json"), doc); err != nil {
			return err
		}
	}
	return nil
}

// convert turns the v2 document into a generic OpenAPI 3 tree.
func convert(v2 []byte) (map[string]any, error) {
	var doc2 openapi2.T
	if err := json.Unmarshal(v2, &doc2); err != nil {
		return nil, fmt.Errorf("read the v2 document: %w", err)
	}
	doc3, err := openapi2conv.ToV3(&doc2)
	if err != nil {
		return nil, fmt.Errorf("convert to OpenAPI 3: %w", err)
	}
	if err := doc3.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("the OpenAPI 3 document is not valid: %w", err)
	}
	b, err := json.Marshal(doc3)
	if err != nil {
		return nil, err
	}
	var tree map[string]any
	if err := json.Unmarshal(b, &tree); err != nil {
		return nil, err
	}
	errorsAsJSON(tree)
	if err := nameStreamResults(tree); err != nil {
		return nil, err
	}
	return tree, nil
}

// nameStreamResults moves the schema of a streaming route's line (the
// inline {"result": X, "error": google.rpc.Status} that protoc-gen-openapiv2
// titles "Stream result of X") into components as "X.StreamResult", so a
// generated client has a named type to decode each NDJSON line into. A
// streaming route whose answer is not application/x-ndjson is an error:
// its method is missing from proto/fabro/openapi.yaml.
func nameStreamResults(tree map[string]any) error {
	schemas := obj(obj(tree["components"])["schemas"])
	for path, item := range obj(tree["paths"]) {
		for method, op := range obj(item) {
			for _, resp := range obj(obj(op)["responses"]) {
				for mt, media := range obj(obj(resp)["content"]) {
					s := obj(obj(media)["schema"])
					title, _ := s["title"].(string)
					name, ok := strings.CutPrefix(title, "Stream result of ")
					if !ok {
						continue
					}
					if mt != ndjson {
						return fmt.Errorf("%s %s streams but answers %s: add its method to proto/fabro/openapi.yaml (produces %s)", strings.ToUpper(method), path, mt, ndjson)
					}
					name += ".StreamResult"
					s["description"] = "One line of the application/x-ndjson stream: result for each message, or error once when the stream fails."
					schemas[name] = s
					obj(media)["schema"] = map[string]any{"$ref": "#/components/schemas/" + name}
				}
			}
		}
	}
	return nil
}

// errorsAsJSON gives the error responses of the streaming routes the
// content type the server sends them with: v2 has one `produces` per
// operation, so the conversion marks them application/x-ndjson like the
// stream, but an error before the stream starts is one application/json
// google.rpc.Status.
func errorsAsJSON(tree map[string]any) {
	for _, item := range obj(tree["paths"]) {
		for _, op := range obj(item) {
			for code, resp := range obj(obj(op)["responses"]) {
				if strings.HasPrefix(code, "2") {
					continue
				}
				content := obj(obj(resp)["content"])
				if s, ok := content[ndjson]; ok {
					delete(content, ndjson)
					content["application/json"] = s
				}
			}
		}
	}
}

const ndjson = "application/x-ndjson"

// perService is the document of one service: the merged one's routes
// tagged with the service, the schemas those routes reach, and an info
// naming the service, with its proto comment as the description.
func perService(merged, tag map[string]any) map[string]any {
	name := tag["name"].(string)
	doc := map[string]any{}
	for k, v := range merged {
		doc[k] = v
	}
	info := map[string]any{}
	for k, v := range obj(merged["info"]) {
		info[k] = v
	}
	info["title"] = "Fabro API: " + name
	if d, ok := tag["description"].(string); ok && d != "" {
		info["description"] = d
	}
	doc["info"] = info
	doc["tags"] = []any{tag}

	paths := map[string]any{}
	for p, item := range obj(merged["paths"]) {
		ops := map[string]any{}
		for m, op := range obj(item) {
			if slices.Contains(list(obj(op)["tags"]), any(name)) {
				ops[m] = op
			}
		}
		if len(ops) > 0 {
			paths[p] = ops
		}
	}
	doc["paths"] = paths

	comps := map[string]any{}
	for k, v := range obj(merged["components"]) {
		comps[k] = v
	}
	all := obj(comps["schemas"])
	keep := map[string]any{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				if n, ok := strings.CutPrefix(ref, "#/components/schemas/"); ok {
					if _, seen := keep[n]; !seen {
						if s, ok := all[n]; ok {
							keep[n] = s
							walk(s)
						}
					}
				}
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(paths)
	// Request bodies and responses named in components are walked too.
	for k, v := range comps {
		if k != "schemas" {
			walk(v)
		}
	}
	comps["schemas"] = keep
	doc["components"] = comps
	return doc
}

// validate loads a generic OpenAPI 3 tree and validates it: a schema the
// split left out would be a dangling $ref.
func validate(tree map[string]any) error {
	b, err := json.Marshal(tree)
	if err != nil {
		return err
	}
	doc, err := openapi3.NewLoader().LoadFromData(b)
	if err != nil {
		return err
	}
	return doc.Validate(context.Background())
}

func obj(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

// write writes v as indented JSON; encoding/json sorts map keys, so the
// output is the same on every run.
func write(path string, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
