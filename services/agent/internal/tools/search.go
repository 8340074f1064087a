package tools

import (
	"context"
	"fmt"
	"path"
	"strings"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
)

func grepTool() *tool {
	return &tool{
		name: "grep",
		description: "Search file contents with a regular expression (ripgrep, or POSIX grep where ripgrep is missing: keep patterns portable, ERE syntax). " +
			"Results are `file:line:content` lines.",
		category: catRead,
		schema: object([]string{"pattern"}, map[string]*schema{
			"pattern":          str("Regex pattern to search for"),
			"path":             str("File or directory to search in (default: the working directory)"),
			"glob_filter":      str("Glob pattern to filter which files are searched, such as *.go"),
			"case_insensitive": boolean("Case-insensitive search (default: false)"),
			"max_results":      integer("Maximum number of results", 1),
		}),
		run: runGrep,
	}
}

func runGrep(ctx context.Context, s *Set, _ Call, raw []byte) (output, error) {
	a, err := decode[struct {
		Pattern         string `json:"pattern"`
		Path            string `json:"path"`
		GlobFilter      string `json:"glob_filter"`
		CaseInsensitive bool   `json:"case_insensitive"`
		MaxResults      int32  `json:"max_results"`
	}](raw)
	if err != nil {
		return output{}, err
	}
	if a.Pattern == "" {
		return output{}, invalidArgs("pattern must not be empty")
	}
	p := s.abs(a.Path)
	resp, err := s.env.Sandbox.Grep(ctx, &sandboxv1.GrepRequest{
		SandboxId: s.env.SandboxID, Pattern: a.Pattern, Path: p, GlobFilter: a.GlobFilter,
		CaseInsensitive: a.CaseInsensitive, MaxResults: a.MaxResults,
	})
	if err != nil {
		if isNotFound(err) {
			return output{}, failed("Path not found: %s", p)
		}
		return output{}, err
	}
	if len(resp.GetMatches()) == 0 {
		return ok("No matches found.")
	}
	paths := make([]string, len(resp.GetMatches()))
	for i, m := range resp.GetMatches() {
		paths[i] = m.GetPath()
		if !path.IsAbs(paths[i]) && s.env.WorkDir != "" {
			paths[i] = path.Join(s.env.WorkDir, paths[i])
		}
	}
	keep, note, err := s.conceal(ctx, p, paths)
	if err != nil {
		return output{}, err
	}
	var b strings.Builder
	for i, m := range resp.GetMatches() {
		if keep[i] {
			fmt.Fprintf(&b, "%s:%d:%s\n", m.GetPath(), m.GetLineNumber(), m.GetLine())
		}
	}
	if b.Len() == 0 {
		b.WriteString("No matches found.\n")
	}
	b.WriteString(note)
	if resp.GetTruncated() {
		fmt.Fprintf(&b, "[Results limited to %d matches; narrow the pattern or path to see others.]\n", len(resp.GetMatches()))
	}
	return ok(b.String())
}

func globTool() *tool {
	return &tool{
		name: "glob",
		description: "Find files by a glob pattern relative to path: `*` and `?` stay within a path segment, `[abc]` matches one character, `**` as a whole segment crosses directories (`**/*.go` finds Go files at any depth). " +
			"Returns matching paths one per line, sorted.",
		category: catRead,
		schema: object([]string{"pattern"}, map[string]*schema{
			"pattern": str("Glob pattern to match files (e.g. **/*.rs)"),
			"path":    str("Directory to search in (default: working directory)"),
		}),
		run: runGlob,
	}
}

func runGlob(ctx context.Context, s *Set, _ Call, raw []byte) (output, error) {
	a, err := decode[struct {
		Pattern string `json:"pattern"`
		Path    string `json:"path"`
	}](raw)
	if err != nil {
		return output{}, err
	}
	dir := s.abs(a.Path)
	resp, err := s.env.Sandbox.Glob(ctx, &sandboxv1.GlobRequest{SandboxId: s.env.SandboxID, Pattern: a.Pattern, Path: dir})
	if err != nil {
		return output{}, err
	}
	if len(resp.GetPaths()) == 0 {
		return ok("No files matched.")
	}
	paths := make([]string, len(resp.GetPaths()))
	for i, p := range resp.GetPaths() {
		if dir != "" {
			p = path.Join(dir, p)
		}
		paths[i] = p
	}
	keep, note, err := s.conceal(ctx, dir, paths)
	if err != nil {
		return output{}, err
	}
	var b strings.Builder
	for i, p := range paths {
		if keep[i] {
			b.WriteString(p)
			b.WriteByte('\n')
		}
	}
	if b.Len() == 0 {
		b.WriteString("No files matched.\n")
	}
	b.WriteString(note)
	return ok(b.String())
}
