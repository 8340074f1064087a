package daytona

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/services/sandbox/internal/grepout"
)

// Grep implements driver.Searcher with ripgrep when the sandbox has it,
// else POSIX grep, run by the helper inside the path it resolved; the
// matches are fetched as a file and parsed here, as the local driver
// parses them (ripgrep's JSON; grep's NUL-separated names).
func (s *sandbox) Grep(ctx context.Context, o driver.GrepOptions) (driver.GrepResult, error) {
	reqPath := cmpOr(o.Path, ".")
	backend := o.Backend
	if backend == driver.BackendAuto {
		backend = driver.BackendPOSIX
		if s.rg {
			backend = driver.BackendRipgrep
		}
	}
	if backend == driver.BackendRipgrep && !s.rg {
		return driver.GrepResult{}, fmt.Errorf("%w: ripgrep is not installed in the sandbox", driver.ErrUnsupported)
	}
	var argv []string
	switch backend {
	case driver.BackendRipgrep:
		argv = []string{"rg", "--no-config", "--hidden", "--no-ignore", "--no-messages", "--json", "--no-unicode"}
		if o.CaseInsensitive {
			argv = append(argv, "-i")
		}
		if o.GlobFilter != "" {
			argv = append(argv, "--glob", o.GlobFilter)
		}
		argv = append(argv, "-e", grepout.RipgrepPattern(o.Pattern))
	case driver.BackendPOSIX:
		argv = []string{"grep", "-r", "-n", "-H", "-I", "-s", "--null", "-E"}
		if o.CaseInsensitive {
			argv = append(argv, "-i")
		}
		if o.GlobFilter != "" {
			argv = append(argv, "--include="+o.GlobFilter)
		}
		argv = append(argv, "-e", grepout.POSIXPattern(o.Pattern))
	default:
		return driver.GrepResult{}, fmt.Errorf("%w: unknown grep backend %d", driver.ErrInvalid, backend)
	}
	base := s.dir + "/g-" + randomID()
	var g struct {
		IsDir  int    `json:"isdir"`
		Exit   int    `json:"exit"`
		Stderr string `json:"stderr"`
	}
	if err := s.helper(ctx, map[string]any{"op": "grep", "path": reqPath, "argv": argv, "out": base + ".out", "err": base + ".err"}, &g); err != nil {
		return driver.GrepResult{}, err
	}
	defer s.removeOwn(context.WithoutCancel(ctx), base+".out")
	res := driver.GrepResult{Backend: backend}
	if g.IsDir == 0 && o.GlobFilter != "" && !driver.MatchName(o.GlobFilter, path.Base(reqPath)) {
		return res, nil // the tools disagree on filters for a file named outright
	}
	name := func(printed []byte) string {
		if g.IsDir == 0 {
			return reqPath
		}
		return path.Join(reqPath, path.Clean(string(printed)))
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		br := bufio.NewReaderSize(pr, 64<<10)
		var err error
		if backend == driver.BackendRipgrep {
			res.Truncated, err = grepout.ParseRipgrepJSON(br, name, o.MaxResults, &res.Matches)
		} else {
			res.Truncated, err = grepout.ParseNull(br, name, o.MaxResults, &res.Matches)
		}
		pr.CloseWithError(err)
		io.Copy(io.Discard, pr)
		done <- err
	}()
	ferr := s.fetch(ctx, base+".out", func(p []byte) { pw.Write(p) })
	pw.CloseWithError(ferr)
	if err := <-done; err != nil {
		return driver.GrepResult{}, fmt.Errorf("%s in the sandbox: %w", argv[0], err)
	}
	if ferr != nil {
		return driver.GrepResult{}, ferr
	}
	if g.Exit == 2 && len(res.Matches) == 0 && g.Stderr != "" {
		return driver.GrepResult{}, fmt.Errorf("%w: %s refused it: %s", driver.ErrInvalidPattern, argv[0], strings.TrimSpace(g.Stderr))
	}
	slices.SortFunc(res.Matches, func(a, b driver.GrepMatch) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return int(a.Line - b.Line)
	})
	return res, nil
}

func cmpOr(a, b string) string {
	if a == "" {
		return b
	}
	return a
}

// Glob implements driver.Searcher over the helper's walk.
func (s *sandbox) Glob(ctx context.Context, pattern, dir string) ([]string, error) {
	maxDepth := 0
	if !slices.Contains(strings.Split(pattern, "/"), "**") {
		maxDepth = strings.Count(pattern, "/") + 1
	}
	files, err := s.Walk(ctx, dir, maxDepth, nil)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range files {
		if driver.MatchGlob(pattern, f.Path) {
			out = append(out, f.Path)
		}
	}
	return out, nil
}

// Walk implements driver.Searcher.
func (s *sandbox) Walk(ctx context.Context, dir string, maxDepth int, exclude []string) ([]driver.WalkedFile, error) {
	var w struct {
		Files []driver.WalkedFile `json:"files"`
	}
	if exclude == nil {
		exclude = []string{}
	}
	if err := s.helper(ctx, map[string]any{"op": "walk", "path": dir, "maxdepth": maxDepth, "exclude": exclude}, &w); err != nil {
		return nil, err
	}
	if len(w.Files) == 0 {
		return nil, nil
	}
	slices.SortFunc(w.Files, func(a, b driver.WalkedFile) int { return strings.Compare(a.Path, b.Path) })
	return w.Files, nil
}
