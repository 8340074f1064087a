package daytona

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// maxLineBytes is how much of a matching line a result carries.
const maxLineBytes = 2000

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
		argv = append(argv, "-e", rgPattern(o.Pattern))
	case driver.BackendPOSIX:
		argv = []string{"grep", "-r", "-n", "-H", "-I", "-s", "--null", "-E"}
		if o.CaseInsensitive {
			argv = append(argv, "-i")
		}
		if o.GlobFilter != "" {
			argv = append(argv, "--include="+o.GlobFilter)
		}
		argv = append(argv, "-e", posixPattern(o.Pattern))
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
			res.Truncated, err = parseRgJSON(br, name, o.MaxResults, &res.Matches)
		} else {
			res.Truncated, err = parseNull(br, name, o.MaxResults, &res.Matches)
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

// parseNull reads grep's "path\0line:text\n" records, the name up to its
// NUL so a newline in a name stays in it.
func parseNull(br *bufio.Reader, name func([]byte) string, max int, out *[]driver.GrepMatch) (bool, error) {
	for {
		printed, err := br.ReadBytes(0)
		if err == io.EOF && len(printed) == 0 {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("output ends inside a record %q", truncate(printed, 200))
		}
		rest, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return false, err
		}
		num, text, ok := bytes.Cut(bytes.TrimSuffix(rest, []byte{'\n'}), []byte{':'})
		line, perr := strconv.ParseInt(string(num), 10, 64)
		if !ok || perr != nil {
			return false, fmt.Errorf("an unparseable record %q", truncate(rest, 200))
		}
		if len(*out) == max {
			return true, nil
		}
		*out = append(*out, newMatch(name(printed[:len(printed)-1]), line, text))
	}
}

type rgData struct {
	Text  *string `json:"text"`
	Bytes []byte  `json:"bytes"`
}

func (d rgData) raw() []byte {
	if d.Text != nil {
		return []byte(*d.Text)
	}
	return d.Bytes
}

type rgMessage struct {
	Type string `json:"type"`
	Data struct {
		Path         rgData `json:"path"`
		Lines        rgData `json:"lines"`
		LineNumber   int64  `json:"line_number"`
		BinaryOffset *int64 `json:"binary_offset"`
	} `json:"data"`
}

// parseRgJSON reads ripgrep's --json messages; a binary file's matches are
// dropped, as grep -I drops them.
func parseRgJSON(br *bufio.Reader, name func([]byte) string, max int, out *[]driver.GrepMatch) (bool, error) {
	var pending []driver.GrepMatch
	for {
		rec, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(rec)) > 0 {
			var m rgMessage
			if jerr := json.Unmarshal(rec, &m); jerr != nil {
				return false, fmt.Errorf("an unparseable message %q: %v", truncate(rec, 200), jerr)
			}
			switch m.Type {
			case "begin":
				pending = pending[:0]
			case "match":
				pending = append(pending, newMatch(name(m.Data.Path.raw()), m.Data.LineNumber, bytes.TrimSuffix(m.Data.Lines.raw(), []byte{'\n'})))
			case "end":
				if m.Data.BinaryOffset == nil {
					for _, pm := range pending {
						if len(*out) == max {
							return true, nil
						}
						*out = append(*out, pm)
					}
				}
				pending = pending[:0]
			}
		}
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
}

func newMatch(p string, line int64, text []byte) driver.GrepMatch {
	m := driver.GrepMatch{Path: p, Line: line}
	if len(text) > maxLineBytes {
		cut := maxLineBytes
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text, m.TextTruncated = text[:cut], true
	}
	m.Text = strings.ToValidUTF8(string(text), "\uFFFD")
	return m
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	return string(bytes.TrimSpace(b))
}

// rgPattern writes non-ASCII bytes as \xHH, which ripgrep in --no-unicode
// mode matches as raw bytes, as grep does in the C locale.
func rgPattern(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if c := p[i]; c >= 0x80 {
			fmt.Fprintf(&b, `\x%02X`, c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// posixPattern rewrites the Perl classes \d and \D, which GNU grep -E lacks,
// into bracket expressions; \w, \s and \b it has.
func posixPattern(p string) string {
	if !strings.Contains(p, `\d`) && !strings.Contains(p, `\D`) {
		return p
	}
	var b strings.Builder
	inClass := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\\' && i+1 < len(p):
			n := p[i+1]
			switch {
			case !inClass && n == 'd':
				b.WriteString("[0-9]")
			case !inClass && n == 'D':
				b.WriteString("[^0-9]")
			case inClass && n == 'd':
				b.WriteString("0-9")
			default:
				b.WriteByte(c)
				b.WriteByte(n)
			}
			i++
			continue
		case c == '[' && !inClass:
			inClass = true
			// A ']' first in a class is literal.
			if i+1 < len(p) && p[i+1] == '^' {
				b.WriteString("[^")
				i++
			} else {
				b.WriteByte(c)
			}
			if i+1 < len(p) && p[i+1] == ']' {
				b.WriteByte(']')
				i++
			}
			continue
		case c == ']' && inClass:
			inClass = false
		}
		b.WriteByte(c)
	}
	return b.String()
}
