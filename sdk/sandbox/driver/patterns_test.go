package driver_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

func TestValidatePattern(t *testing.T) {
	ok := []string{
		`hello`, `func \w+\(`, `^\s*#`, `a{2}`, `a{2,}`, `a{2,3}`, `\{a\}`, `[[:alpha:]_]+`, `[^\d]`, `[]a]`,
		`[\\]`, `a|b`, `()`, `caf.$`, `é`, `\.\*\+\?\(\)\[\]\|\^\$\-\#\&\~`, `X = \d+`, `\bword\B`,
	}
	for _, p := range ok {
		if err := driver.ValidatePattern(p); err != nil {
			t.Errorf("ValidatePattern(%q) = %v; want ok", p, err)
		}
	}
	bad := []struct{ pattern, says string }{
		{``, "empty"},
		{`func (x`, "missing closing )"},
		{`a**`, "invalid nested repetition"},
		{`(a)\1`, "invalid escape"},
		{`(?i)x`, "(?"},
		{`(?:x)`, "(?"},
		{`(?P<n>x)`, "(?"},
		{`\t`, `\t`},
		{`\pL`, `\p`},
		{`\Qa.b\E`, `\Q`},
		{`\/`, `\/`},
		{`\<word`, `\<`},
		{`a{,2}`, "repetition"},
		{`{a}`, `\{`},
		{`[\w]`, `only \d and \\`},
		{`[\]]`, `only \d and \\`},
		{`[é]`, "non-ASCII"},
		{`[[:word:]]`, "not a POSIX class"},
		{`\xff`, `\x`},
	}
	for _, tt := range bad {
		err := driver.ValidatePattern(tt.pattern)
		if !errors.Is(err, driver.ErrInvalidPattern) || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("ValidatePattern(%q) = %v; want ErrInvalidPattern saying %q", tt.pattern, err, tt.says)
		}
	}
}

func TestValidateGlobFilter(t *testing.T) {
	for _, g := range []string{"", "*.go", "?.[ch]", "[^_]*.py", "[!_]*.py", "Makefile"} {
		if err := driver.ValidateGlobFilter(g); err != nil {
			t.Errorf("ValidateGlobFilter(%q) = %v; want ok", g, err)
		}
	}
	bad := []struct{ filter, says string }{
		{"src/*.go", "without '/'"},
		{"*.{go,rs}", "braces"},
		{`a\b`, `'\'`},
		{"[a", "unbalanced"},
		{"!*.go", "exclusion"},
	}
	for _, tt := range bad {
		err := driver.ValidateGlobFilter(tt.filter)
		if !errors.Is(err, driver.ErrInvalidPattern) || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("ValidateGlobFilter(%q) = %v; want ErrInvalidPattern saying %q", tt.filter, err, tt.says)
		}
	}
}
