package drivertest

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// RunSearch checks grep on every back end the driver has, glob and walk.
func RunSearch(t *testing.T, newDriver func(t *testing.T) driver.Driver) {
	d := newDriver(t)
	sb := NewSandbox(t, d, driver.Spec{})
	ctx := t.Context()
	write(t, sb, map[string]string{
		"src/main.go":          "package main\n\nfunc main() {\n\tprintln(\"Hello\")\n}\n",
		"src/util/util.go":     "package util\n// hello from util\nvar X = 42\n",
		"src/util/notes.txt":   "hello notes\nHELLO LOUD\n",
		"src/.hidden/h.go":     "package hidden // hello hidden\n",
		"docs/a:colon.md":      "hello: with a colon in the name\n",
		"docs/bad-utf8.txt":    "hello \xff\xfe end\n",
		"bin/blob.bin":         "hello\x00binary\x00",
		"vendor/lib/lib.go":    "package lib // hello vendored\n",
		"top.txt":              "nothing here\n",
		".gitignore":           "docs/\n",
		"deep/a/b/c/d/deep.go": "hello deep\n",
	})

	m := func(p string, line int64, text string) driver.GrepMatch {
		return driver.GrepMatch{Path: p, Line: line, Text: text}
	}
	tests := []struct {
		name string
		opts driver.GrepOptions
		want []driver.GrepMatch
	}{
		{"literal everywhere", driver.GrepOptions{Pattern: "hello"}, []driver.GrepMatch{
			m("deep/a/b/c/d/deep.go", 1, "hello deep"),
			m("docs/a:colon.md", 1, "hello: with a colon in the name"),
			m("docs/bad-utf8.txt", 1, "hello \uFFFD end"),
			m("src/.hidden/h.go", 1, "package hidden // hello hidden"),
			m("src/util/notes.txt", 1, "hello notes"),
			m("src/util/util.go", 2, "// hello from util"),
			m("vendor/lib/lib.go", 1, "package lib // hello vendored"),
		}},
		{"case insensitive, glob filter, relative path", driver.GrepOptions{Pattern: "hello", Path: "src", CaseInsensitive: true, GlobFilter: "*.go"}, []driver.GrepMatch{
			m("src/.hidden/h.go", 1, "package hidden // hello hidden"),
			m("src/main.go", 4, "\tprintln(\"Hello\")"),
			m("src/util/util.go", 2, "// hello from util"),
		}},
		{"regex with classes", driver.GrepOptions{Pattern: `[A-Z]+ L(O|U)UD$`, Path: "src/util"}, []driver.GrepMatch{
			m("src/util/notes.txt", 2, "HELLO LOUD"),
		}},
		{"perl digit class", driver.GrepOptions{Pattern: `X = \d+`, Path: "./src"}, []driver.GrepMatch{
			m("src/util/util.go", 3, "var X = 42"),
		}},
		{"a single file", driver.GrepOptions{Pattern: "^package", Path: "src/main.go"}, []driver.GrepMatch{
			m("src/main.go", 1, "package main"),
		}},
		{"a single file, filtered out", driver.GrepOptions{Pattern: "package", Path: "src/main.go", GlobFilter: "*.txt"}, nil},
		{"pattern that looks like a flag", driver.GrepOptions{Pattern: "--pre=/bin/sh"}, nil},
		{"no match", driver.GrepOptions{Pattern: "zzz_absent"}, nil},
	}
	backends := []driver.GrepBackend{driver.BackendRipgrep, driver.BackendPOSIX}
	ran := 0
	for _, be := range backends {
		if _, err := sb.Grep(ctx, driver.GrepOptions{Pattern: "x", Backend: be, MaxResults: 1}); errors.Is(err, driver.ErrUnsupported) {
			t.Logf("grep back end %d is not available in this sandbox: %v", be, err)
			continue
		}
		ran++
		for _, tt := range tests {
			t.Run(backendName(be)+"/"+tt.name, func(t *testing.T) {
				o := tt.opts
				o.Backend, o.MaxResults = be, 100
				res, err := sb.Grep(ctx, o)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tt.want, res.Matches); diff != "" || res.Backend != be || res.Truncated {
					t.Errorf("backend %d truncated %v; matches (-want +got):\n%s", res.Backend, res.Truncated, diff)
				}
			})
		}
		t.Run(backendName(be)+"/max results", func(t *testing.T) {
			res, err := sb.Grep(ctx, driver.GrepOptions{Pattern: "hello", Backend: be, MaxResults: 2})
			if err != nil || len(res.Matches) != 2 || !res.Truncated {
				t.Errorf("got %d matches, truncated %v, %v; want 2, truncated", len(res.Matches), res.Truncated, err)
			}
		})
	}
	if ran == 0 {
		t.Error("the sandbox has no grep back end")
	}

	t.Run("a pattern the tool refuses says why", func(t *testing.T) {
		for _, be := range append(backends, driver.BackendAuto) {
			_, err := sb.Grep(ctx, driver.GrepOptions{Pattern: "func (x", Backend: be, MaxResults: 10})
			if errors.Is(err, driver.ErrUnsupported) {
				continue
			}
			msg := strings.ToLower(fmt.Sprint(err))
			if !errors.Is(err, driver.ErrInvalidPattern) || !strings.Contains(msg, "unclosed") && !strings.Contains(msg, "unmatched") && !strings.Contains(msg, "missing") {
				t.Errorf("back end %s: Grep(%q) = %v; want ErrInvalidPattern saying the group is not closed", backendName(be), "func (x", err)
			}
		}
	})

	if ran == len(backends) {
		t.Run("back ends agree", func(t *testing.T) { backendsAgree(t, NewSandbox(t, d, driver.Spec{})) })
	}

	t.Run("glob", func(t *testing.T) {
		tests := []struct {
			pattern, dir string
			want         []string
		}{
			{"**/*.go", "", []string{"deep/a/b/c/d/deep.go", "src/.hidden/h.go", "src/main.go", "src/util/util.go", "vendor/lib/lib.go"}},
			{"*.txt", "", []string{"top.txt"}},
			{"*.go", "src", []string{"main.go"}},
			{"util/[nu]*.???", "src", []string{"util/notes.txt"}},
			{"**/util/**", "", []string{"src/util/notes.txt", "src/util/util.go"}},
			{".*", "", []string{".gitignore"}},
			{"*", "missing", nil},
		}
		for _, tt := range tests {
			got, err := sb.Glob(ctx, tt.pattern, tt.dir)
			if err != nil {
				t.Errorf("Glob(%q, %q): %v", tt.pattern, tt.dir, err)
				continue
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Glob(%q, %q) (-want +got):\n%s", tt.pattern, tt.dir, diff)
			}
		}
	})

	t.Run("walk", func(t *testing.T) {
		tests := []struct {
			dir     string
			depth   int
			exclude []string
			want    []driver.WalkedFile
		}{
			{"src", 0, []string{".hidden"}, []driver.WalkedFile{wf("main.go", 48), wf("util/notes.txt", 23), wf("util/util.go", 43)}},
			{"src", 1, nil, []driver.WalkedFile{wf("main.go", 48)}},
			{"", 1, nil, []driver.WalkedFile{wf(".gitignore", 6), wf("top.txt", 13)}},
			{"missing", 0, nil, nil},
		}
		for _, tt := range tests {
			got, err := sb.Walk(ctx, tt.dir, tt.depth, tt.exclude)
			if err != nil {
				t.Errorf("Walk(%q): %v", tt.dir, err)
				continue
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Walk(%q, %d, %q) (-want +got):\n%s", tt.dir, tt.depth, tt.exclude, diff)
			}
		}
	})
}

func wf(p string, n int64) driver.WalkedFile { return driver.WalkedFile{Path: p, Size: n} }

func backendName(b driver.GrepBackend) string {
	return map[driver.GrepBackend]string{driver.BackendRipgrep: "ripgrep", driver.BackendPOSIX: "posix"}[b]
}

// backendsAgree runs many patterns, each with and without case folding,
// through every back end over text that mixes ASCII, multi-byte UTF-8 and
// invalid bytes, and checks that the results are the same, or that both
// refuse the pattern. Patterns ValidatePattern refuses never reach a
// driver, so they are skipped.
func backendsAgree(t *testing.T, sb driver.Sandbox) {
	ctx := t.Context()
	write(t, sb, map[string]string{
		"agree/text.txt": "école\nÉCOLE\ncafé\nstraße STRASSE\nnaïve x\ntab\there\nbrace {a} [b]\nword_1 日本語\n\xff\xfe bad bytes\nK kelvin \u212a\nſ long s\n" +
			"func main() {\n  x := 42 // answer\n}\n-- dash --\na.b*c+d?e\n",
		"agree/other.go": "package agree\n\nfunc Énorme() int { return 1 }\n",
		"agree/sub/.dot": "hidden école\n",
	})
	patterns := []string{
		"école", "ÉCOLE", "é", "caf.$", "caf..$", `\w+$`, `^\W`, `\S+ 日`, `[^a-z]+$`, "na.ve", "straße", "STRASSE", "ß",
		"k", "s", `\bx\b`, `\d+`, `[[:digit:]]{2}`, `[[:upper:]]+`, `[[:alpha:]]+ [[:alpha:]]+`, `\{a\}`, `\[b\]`,
		`a\.b\*c\+d\?e`, `^-- `, `func \w+\(`, `:=`, "^$", "x|é", `(é|É)cole`, "日本", "[日]", `\t`, "(?i)école",
		`\xff`, `^.{5}$`, `^..$`, ".", `[^[:print:]]`,
	}
	for _, p := range patterns {
		if driver.ValidatePattern(p) != nil {
			continue
		}
		for _, fold := range []bool{false, true} {
			var got [2]driver.GrepResult
			var errs [2]error
			for i, be := range []driver.GrepBackend{driver.BackendRipgrep, driver.BackendPOSIX} {
				got[i], errs[i] = sb.Grep(ctx, driver.GrepOptions{Pattern: p, Path: "agree", CaseInsensitive: fold, MaxResults: 1000, Backend: be})
			}
			if errs[0] != nil || errs[1] != nil {
				if !errors.Is(errs[0], driver.ErrInvalidPattern) || !errors.Is(errs[1], driver.ErrInvalidPattern) {
					t.Errorf("Grep(%q, fold %v): ripgrep %v, grep %v", p, fold, errs[0], errs[1])
				}
				continue
			}
			if diff := cmp.Diff(got[0].Matches, got[1].Matches); diff != "" {
				t.Errorf("Grep(%q, fold %v): the back ends disagree (-ripgrep +grep):\n%s", p, fold, diff)
			}
		}
	}
}
