package main

import (
	"os"
	"strings"
	"testing"
)

// TestPerService: every service's document is valid OpenAPI 3 (no $ref
// left dangling by the split), holds only that service's routes, and
// drops schemas it does not reach; a document missing a schema it
// references fails validation.
func TestPerService(t *testing.T) {
	v2, err := os.ReadFile("../../fabro.swagger.json")
	if err != nil {
		t.Fatal(err)
	}
	merged, err := convert(v2)
	if err != nil {
		t.Fatal(err)
	}
	all := len(obj(obj(merged["components"])["schemas"]))
	tags := list(merged["tags"])
	if len(tags) < 5 {
		t.Fatalf("%d tags, want one per service", len(tags))
	}
	for _, tag := range tags {
		name := obj(tag)["name"].(string)
		doc := perService(merged, obj(tag))
		if err := validate(doc); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if title := obj(doc["info"])["title"]; title != "Fabro API: "+name {
			t.Errorf("%s: title %q", name, title)
		}
		paths := obj(doc["paths"])
		if len(paths) == 0 {
			t.Errorf("%s: no paths", name)
		}
		for p, item := range paths {
			for m, op := range obj(item) {
				if tags := list(obj(op)["tags"]); len(tags) != 1 || tags[0] != name {
					t.Errorf("%s: %s %s has tags %v", name, m, p, tags)
				}
			}
		}
		if n := len(obj(obj(doc["components"])["schemas"])); n == 0 || n >= all {
			t.Errorf("%s: %d of %d schemas", name, n, all)
		}
		if name == "VaultService" {
			schemas := obj(obj(doc["components"])["schemas"])
			for s := range schemas {
				if strings.HasPrefix(s, "fabro.agent.") {
					t.Errorf("VaultService keeps %s", s)
				}
			}
			delete(schemas, "fabro.vault.v1.SecretMetadata")
			if err := validate(doc); err == nil {
				t.Errorf("a document without a schema it references is valid")
			}
		}
	}
}
