package drivertest

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fabro-sh/fabro-go/services/sandbox/driver"
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
