package driver_test

import (
	"testing"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// "[!...]" negates as in POSIX bracket expressions (the shell, ripgrep's
// --glob, grep's --include), in Glob and in grep's filter alike.
func TestBracketNegation(t *testing.T) {
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{"[!a]", "b", true},
		{"[!a]", "a", false},
		{"[^a]", "a", false},
		{"[!a]*.go", "main.go", true},
		{"[!m]*.go", "main.go", false},
		{"[]!]", "!", true}, // ']' first is literal, '!' later too
		{"[a!]", "!", true},
		{"[a!]", "b", false},
		{"[!]a]", "]", false},
		{"[!]a]", "b", true},
		{"x[!0-9]", "x5", false},
		{"x[!0-9]", "xy", true},
	}
	for _, tt := range tests {
		if got := driver.MatchGlob(tt.pattern, tt.name); got != tt.want {
			t.Errorf("MatchGlob(%q, %q) = %v; want %v", tt.pattern, tt.name, got, tt.want)
		}
		if got := driver.MatchGlob("src/**/"+tt.pattern, "src/a/b/"+tt.name); got != tt.want {
			t.Errorf("MatchGlob(src/**/%q, src/a/b/%q) = %v; want %v", tt.pattern, tt.name, got, tt.want)
		}
		if err := driver.ValidateGlobFilter(tt.pattern); err != nil {
			t.Errorf("ValidateGlobFilter(%q) = %v", tt.pattern, err)
			continue
		}
		if got := driver.MatchName(tt.pattern, tt.name); got != tt.want {
			t.Errorf("MatchName(%q, %q) = %v; want %v", tt.pattern, tt.name, got, tt.want)
		}
	}
}
