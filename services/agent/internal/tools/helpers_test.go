package tools

import (
	"encoding/json"
	"strings"
	"testing"
)

// args renders a map as JSON arguments.
func args(t *testing.T, m map[string]any) string {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func run(t *testing.T, s *Set, name string, a map[string]any) Result {
	t.Helper()
	return s.Run(t.Context(), Call{ID: "call-1", Name: name, Arguments: args(t, a)})
}

// check asserts a result's error state and that its output contains every
// want string.
func check(t *testing.T, r Result, wantKind string, want ...string) {
	t.Helper()
	if wantKind == "" && r.IsError {
		t.Fatalf("unexpected error result (%s): %s", r.ErrorKind, r.Output)
	}
	if wantKind != "" && (!r.IsError || r.ErrorKind != wantKind) {
		t.Fatalf("got IsError=%v kind=%q, want kind %q; output:\n%s", r.IsError, r.ErrorKind, wantKind, r.Output)
	}
	for _, w := range want {
		if !strings.Contains(r.Output, w) {
			t.Fatalf("output does not contain %q:\n%s", w, r.Output)
		}
	}
}
