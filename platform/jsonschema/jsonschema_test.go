package jsonschema

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

const toolSchema = `{
  "type": "object",
  "$defs": {
    "status": {"enum": ["pending", "in_progress", "completed"]},
    "step": {"type": "object", "properties": {"step": {"type": "string", "minLength": 1}, "status": {"$ref": "#/$defs/status"}},
             "required": ["step", "status"], "additionalProperties": false}
  },
  "definitions": {"limit": {"type": "integer", "minimum": 1, "maximum": 100}},
  "properties": {
    "file_path": {"type": "string", "pattern": "^[^/]"},
    "limit": {"$ref": "#/definitions/limit"},
    "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
    "plan": {"type": "array", "items": {"$ref": "#/$defs/step"}, "minItems": 1, "maxItems": 2},
    "mode": {"const": "fast"},
    "name": {"type": "string", "maxLength": 3},
    "target": {"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "number", "minimum": 10}]},
    "either": {"anyOf": [{"type": "string"}, {"type": "boolean"}]},
    "both": {"allOf": [{"type": "string"}, {"minLength": 2}]},
    "nope": {"not": {"type": "string"}},
    "never": false
  },
  "required": ["file_path"],
  "additionalProperties": false
}`

func TestValidate(t *testing.T) {
	s, err := Compile([]byte(toolSchema))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args string
		want string // "" valid; else the whole error text
	}{
		{"valid", `{"file_path":"a.txt","limit":5,"plan":[{"step":"a","status":"pending"}],"mode":"fast","target":"x","either":true,"both":"ab","nope":3}`, ""},
		{"not an object", `["a"]`, "arguments: expected object, got array"},
		{"missing required", `{}`, `arguments: missing required property "file_path"`},
		{"wrong type", `{"file_path":3}`, "arguments.file_path: expected string, got number"},
		{"null", `{"file_path":null}`, "arguments.file_path: expected string, got null"},
		{"unknown property", `{"file_path":"a","bogus":1}`, `arguments: unknown property "bogus" (allowed: both, either, file_path, limit, mode, name, never, nope, plan, ratio, target)`},
		{"pattern", `{"file_path":"/etc"}`, `arguments.file_path: "/etc" does not match the pattern ^[^/]`},
		{"$ref definitions: integer", `{"file_path":"a","limit":1.5}`, "arguments.limit: expected integer, got number"},
		{"$ref definitions: minimum", `{"file_path":"a","limit":0}`, "arguments.limit: must be at least 1, got 0"},
		{"$ref definitions: maximum", `{"file_path":"a","limit":101}`, "arguments.limit: must be at most 100, got 101"},
		{"exclusive minimum", `{"file_path":"a","ratio":0}`, "arguments.ratio: must be greater than 0, got 0"},
		{"exclusive maximum", `{"file_path":"a","ratio":1}`, "arguments.ratio: must be less than 1, got 1"},
		{"$ref $defs: enum in items", `{"file_path":"a","plan":[{"step":"a","status":"done"}]}`, `arguments.plan[0].status: "done" is not one of pending, in_progress, completed`},
		{"$ref $defs: nested unknown property", `{"file_path":"a","plan":[{"step":"a","status":"pending","x":1}]}`, `arguments.plan[0]: unknown property "x" (allowed: status, step)`},
		{"min length", `{"file_path":"a","plan":[{"step":"","status":"pending"}]}`, "arguments.plan[0].step: must be at least 1 character long, got 0"},
		{"max length", `{"file_path":"a","name":"abcd"}`, "arguments.name: must be at most 3 characters long, got 4"},
		{"min items", `{"file_path":"a","plan":[]}`, "arguments.plan: must have at least 1 item, got 0"},
		{"max items", `{"file_path":"a","plan":[{"step":"a","status":"pending"},{"step":"b","status":"pending"},{"step":"c","status":"pending"}]}`, "arguments.plan: must have at most 2 items, got 3"},
		{"const", `{"file_path":"a","mode":"slow"}`, `arguments.mode: must be "fast", got "slow"`},
		{"oneOf none", `{"file_path":"a","target":true}`, "arguments.target: matches none of oneOf (the first alternative: arguments.target: expected string, got boolean)"},
		{"oneOf two", `{"file_path":"a","target":12}`, "arguments.target: matches more than one of oneOf (alternatives 1 and 2); it must match exactly one"},
		{"anyOf", `{"file_path":"a","either":3}`, "arguments.either: matches none of anyOf (the first alternative: arguments.either: expected string, got number)"},
		{"allOf", `{"file_path":"a","both":"a"}`, "arguments.both: must be at least 2 characters long, got 1"},
		{"not", `{"file_path":"a","nope":"s"}`, `arguments.nope: must not match the schema under "not"`},
		{"false schema", `{"file_path":"a","never":1}`, "arguments.never: no value is allowed here"},
		{"several problems", `{"file_path":3,"limit":0}`, "arguments.file_path: expected string, got number (and 1 more problem)"},
		{"not JSON", `{"file_path":`, "arguments: not valid JSON: unexpected EOF"},
		{"trailing data", `{"file_path":"a"} x`, "arguments: not valid JSON: extra data after the value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.ValidateJSON([]byte(tt.args), "arguments")
			got := ""
			if err != nil {
				got = err.Error()
				var e *Error
				if !errors.As(err, &e) {
					t.Errorf("error %T, want *Error", err)
				}
			}
			if got != tt.want {
				t.Errorf("ValidateJSON(%s)\n got %q\nwant %q", tt.args, got, tt.want)
			}
		})
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name, schema, want string
	}{
		{"not JSON", `{"type":`, "not valid JSON"},
		{"unknown type", `{"type":"strnig"}`, "not a valid JSON Schema"},
		{"bad required", `{"required":"x"}`, "not a valid JSON Schema"},
		{"remote $ref", `{"$ref":"https://example.com/s.json"}`, "only references inside the schema"},
		{"missing local $ref", `{"$ref":"#/$defs/nope"}`, "nope"},
		{"bad pattern", `{"pattern":"("}`, "pattern"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Compile([]byte(tt.schema))
			t.Log(err)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Compile(%s) = %v, want an error containing %q", tt.schema, err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), location) {
				t.Errorf("the error names the internal location: %v", err)
			}
		})
	}
}

func TestCacheBounded(t *testing.T) {
	first, err := CompileCached([]byte(`{"title":"0"}`))
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= cacheEntries; i++ {
		if _, err := CompileCached([]byte(fmt.Sprintf(`{"title":"%d"}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	cache.Lock()
	n := len(cache.m)
	cache.Unlock()
	if n > cacheEntries {
		t.Errorf("%d cached schemas, want at most %d", n, cacheEntries)
	}
	again, _ := CompileCached([]byte(`{"title":"0"}`))
	if again == first {
		t.Error("the oldest schema was not evicted")
	}
	if _, err := CompileCached([]byte(`{"type":1}`)); err == nil {
		t.Error("a bad schema compiled through the cache")
	}
}

func TestTypesAndCache(t *testing.T) {
	a := MustCompileCached(`{"type":"object"}`)
	if b := MustCompileCached(`{"type":"object"}`); a != b {
		t.Error("the same text compiled twice")
	}
	if got := a.Types(); len(got) != 1 || got[0] != "object" {
		t.Errorf("Types = %v", got)
	}
	s, _ := Compile([]byte(`{"type":["string","null"]}`))
	if got := s.Types(); len(got) != 2 {
		t.Errorf("Types = %v", got)
	}
	s, _ = Compile([]byte(`{}`))
	if got := s.Types(); got != nil {
		t.Errorf("Types of {} = %v, want nil", got)
	}
	if err := s.Validate(map[string]any{"x": 1}, "v"); err != nil {
		t.Errorf("{} rejects a value: %v", err)
	}
}
