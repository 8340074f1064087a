package jsonschema

import "testing"

// Typical tool calls: read_file's flat arguments, and update_plan's array
// of objects with an enum, each with the schema the agent offers for it.
var benchCases = []struct {
	name string
	old  *oldSchema
	args string
}{
	{"read_file", oldObject([]string{"file_path"}, map[string]*oldSchema{
		"file_path": oldStr("path"), "offset": oldInteger("first line", 0), "limit": oldIntegerRange("lines", 1, 2000),
	}), `{"file_path":"services/agent/internal/tools/schema.go","offset":120,"limit":400}`},
	{"update_plan", oldObject([]string{"plan"}, map[string]*oldSchema{
		"explanation": oldStr("why"),
		"plan": oldArray("steps", oldObject([]string{"step", "status"}, map[string]*oldSchema{
			"step": oldStr("step"), "status": oldEnum("status", "pending", "in_progress", "completed"),
		})),
	}), `{"explanation":"split the work","plan":[{"step":"read the code","status":"completed"},{"step":"write the test","status":"in_progress"},` +
		`{"step":"fix the bug","status":"pending"},{"step":"run the suite","status":"pending"},{"step":"commit","status":"pending"}]}`},
}

// BenchmarkToolArguments decodes and validates a tool call's arguments
// with the agent's old subset validator (old) and with this package (new),
// side by side in one run; compare new/old.
func BenchmarkToolArguments(b *testing.B) {
	for _, bc := range benchCases {
		schema := MustCompileCached(bc.old.json()) // the same schema text
		b.Run(bc.name+"/old", func(b *testing.B) {
			for b.Loop() {
				if _, err := bc.old.validateJSON(bc.args); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bc.name+"/new", func(b *testing.B) {
			for b.Loop() {
				if _, err := schema.ValidateJSON([]byte(bc.args), "arguments"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestBaselineAgrees keeps the benchmark honest: both validators accept the
// benchmark's arguments and reject the same broken ones.
func TestBaselineAgrees(t *testing.T) {
	for _, bc := range benchCases {
		schema := MustCompileCached(bc.old.json())
		for _, args := range []string{bc.args, `{"bogus":1}`, `[]`} {
			_, errOld := bc.old.validateJSON(args)
			_, errNew := schema.ValidateJSON([]byte(args), "arguments")
			if (errOld == nil) != (errNew == nil) {
				t.Errorf("%s %s: old %v, new %v", bc.name, args, errOld, errNew)
			}
		}
	}
}
