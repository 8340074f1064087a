package openapi

import (
	"encoding/json"
	"flag"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/type-names.golden from the documents")

// TestTypeNames pins the type names of the OpenAPI documents: a generated
// client's types are named after them, so a rename breaks its users like
// a removed field does. After a deliberate change (a new message),
// `go test ./openapi -update` rewrites the golden file; review its diff.
func TestTypeNames(t *testing.T) {
	var v2 struct {
		Definitions map[string]json.RawMessage `json:"definitions"`
	}
	if err := json.Unmarshal(Document, &v2); err != nil {
		t.Fatal(err)
	}
	var v3 struct {
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(DocumentV3, &v3); err != nil {
		t.Fatal(err)
	}
	var lines []string
	fqn := regexp.MustCompile(`^(fabro|google)(\.[a-z][a-z0-9]*)+(\.[A-Z][A-Za-z0-9]*)+$`)
	for name := range v2.Definitions {
		if !fqn.MatchString(name) {
			t.Errorf("definition %q is not a fully qualified proto name", name)
		}
		lines = append(lines, "swagger "+name)
	}
	for name := range v3.Components.Schemas {
		if !fqn.MatchString(name) {
			t.Errorf("schema %q is not a fully qualified proto name", name)
		}
		lines = append(lines, "openapi "+name)
	}
	slices.Sort(lines)
	got := strings.Join(lines, "\n") + "\n"
	const golden = "testdata/type-names.golden"
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("the OpenAPI type names changed (a rename breaks generated clients); if on purpose, run `make openapi-names` (go test ./openapi -update in gen/) and commit %s:\n%s", golden, lineDiff(string(want), got))
	}
}

// lineDiff lists the lines only in want (-) and only in got (+).
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for _, l := range w {
		if !slices.Contains(g, l) {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range g {
		if !slices.Contains(w, l) {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}
