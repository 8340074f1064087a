package tools

import (
	"context"
	"fmt"
	"slices"
	"strings"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
)

// apply_patch: the v4a format of Codex (see agent.md 1.2), applied
// atomically: every hunk is parsed, matched and computed against the files
// in memory before anything is written, and a write that fails midway is
// rolled back. Differences from Codex, on purpose:
//   - atomic (Codex leaves earlier hunks applied when a later one fails);
//   - stacked "@@ ctx" lines are sought in order (class, then method);
//   - a pure-addition chunk under an "@@ ctx" line is inserted right after
//     that context line; without context it is appended at end of file,
//     as Codex does;
//   - an "*** End of File" chunk is sought at the end first and then, as
//     aider does, anywhere after the cursor;
//   - CRLF files keep their CRLF line ends.

const (
	patchBegin = "*** Begin Patch"
	patchEnd   = "*** End Patch"
	addPrefix  = "*** Add File: "
	delPrefix  = "*** Delete File: "
	updPrefix  = "*** Update File: "
	movePrefix = "*** Move to: "
	eofMarker  = "*** End of File"
)

type hunkKind int

const (
	hunkAdd hunkKind = iota
	hunkDelete
	hunkUpdate
)

type hunk struct {
	kind     hunkKind
	path     string
	moveTo   string
	contents string // Add
	chunks   []chunk
}

type chunk struct {
	contexts []string // "@@ text" lines, sought in order
	old, new []string
	// ctxIdx[i] is, for a context line new[i], its index in old; -1 for
	// an added line. A context line keeps the file's text, so a fuzzy
	// match never rewrites it.
	ctxIdx []int
	eof    bool
}

type patchError struct {
	line int // 1-based line of the patch; 0 when not about one hunk
	msg  string
}

func (e *patchError) Error() string {
	if e.line > 0 {
		return fmt.Sprintf("Invalid patch hunk on line %d: %s", e.line, e.msg)
	}
	return "Invalid patch: " + e.msg
}

// parsePatch parses a v4a patch (lenient mode: a heredoc wrapper and
// whitespace-padded markers are accepted).
func parsePatch(text string) ([]hunk, error) {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSuffix(l, "\r")
	}
	if len(lines) >= 4 && (lines[0] == "<<EOF" || lines[0] == "<<'EOF'" || lines[0] == `<<"EOF"`) && strings.HasSuffix(lines[len(lines)-1], "EOF") {
		lines = lines[1 : len(lines)-1]
	}
	if strings.TrimSpace(lines[0]) != patchBegin {
		return nil, &patchError{msg: "The first line of the patch must be '*** Begin Patch'"}
	}
	if strings.TrimSpace(lines[len(lines)-1]) != patchEnd || len(lines) < 2 {
		return nil, &patchError{msg: "The last line of the patch must be '*** End Patch'"}
	}
	body := lines[1 : len(lines)-1]
	var hunks []hunk
	for i := 0; i < len(body); {
		line := strings.TrimSpace(body[i])
		lineNo := i + 2
		switch {
		case line == "":
			i++
		case strings.HasPrefix(line, addPrefix):
			h := hunk{kind: hunkAdd, path: strings.TrimSpace(strings.TrimPrefix(line, addPrefix))}
			i++
			var b strings.Builder
			for i < len(body) && strings.HasPrefix(body[i], "+") {
				b.WriteString(body[i][1:])
				b.WriteByte('\n')
				i++
			}
			h.contents = b.String()
			hunks = append(hunks, h)
		case strings.HasPrefix(line, delPrefix):
			hunks = append(hunks, hunk{kind: hunkDelete, path: strings.TrimSpace(strings.TrimPrefix(line, delPrefix))})
			i++
		case strings.HasPrefix(line, updPrefix):
			h := hunk{kind: hunkUpdate, path: strings.TrimSpace(strings.TrimPrefix(line, updPrefix))}
			i++
			if i < len(body) && strings.HasPrefix(strings.TrimSpace(body[i]), movePrefix) {
				h.moveTo = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(body[i]), movePrefix))
				i++
			}
			for i < len(body) {
				if strings.TrimSpace(body[i]) == "" {
					i++
					continue
				}
				if strings.HasPrefix(body[i], "*") && strings.TrimSpace(body[i]) != eofMarker {
					break
				}
				c, n, err := parseChunk(body[i:], i+2, len(h.chunks) == 0)
				if err != nil {
					return nil, err
				}
				h.chunks = append(h.chunks, c)
				i += n
			}
			if len(h.chunks) == 0 {
				return nil, &patchError{line: lineNo, msg: fmt.Sprintf("Update file hunk for path '%s' is empty", h.path)}
			}
			hunks = append(hunks, h)
		default:
			return nil, &patchError{line: lineNo, msg: fmt.Sprintf("'%s' is not a valid hunk header. Valid hunk headers: '*** Add File: {path}', '*** Delete File: {path}', '*** Update File: {path}'", line)}
		}
	}
	if len(hunks) == 0 {
		return nil, &patchError{msg: "the patch has no hunks"}
	}
	for _, h := range hunks {
		if h.path == "" {
			return nil, &patchError{msg: "a hunk header has no path"}
		}
	}
	return hunks, nil
}

// parseChunk parses one change chunk starting at lines[0] (patch line
// lineNo) and returns it and how many lines it used.
func parseChunk(lines []string, lineNo int, first bool) (chunk, int, error) {
	var c chunk
	i := 0
	for i < len(lines) {
		t := strings.TrimRight(lines[i], " \t")
		if t == "@@" {
			i++
			continue
		}
		if strings.HasPrefix(t, "@@ ") {
			ctx := strings.TrimPrefix(t, "@@ ")
			ctx = strings.TrimSuffix(ctx, " @@")
			c.contexts = append(c.contexts, ctx)
			i++
			continue
		}
		break
	}
	if i == 0 && !first {
		return c, 0, &patchError{line: lineNo, msg: fmt.Sprintf("Expected update hunk to start with a @@ context marker, got: '%s'", lines[0])}
	}
	start := i
	for i < len(lines) {
		l := lines[i]
		if strings.TrimSpace(l) == eofMarker {
			if i == start {
				return c, 0, &patchError{line: lineNo + i, msg: "Update hunk does not contain any lines"}
			}
			c.eof = true
			i++
			break
		}
		if l == "" {
			c.ctxIdx = append(c.ctxIdx, len(c.old))
			c.old = append(c.old, "")
			c.new = append(c.new, "")
			i++
			continue
		}
		switch l[0] {
		case ' ':
			c.ctxIdx = append(c.ctxIdx, len(c.old))
			c.old = append(c.old, l[1:])
			c.new = append(c.new, l[1:])
		case '-':
			c.old = append(c.old, l[1:])
		case '+':
			c.ctxIdx = append(c.ctxIdx, -1)
			c.new = append(c.new, l[1:])
		default:
			if i == start {
				return c, 0, &patchError{line: lineNo + i, msg: fmt.Sprintf("Unexpected line found in update hunk: '%s'. Every line should start with ' ' (context line), '+' (added line), or '-' (removed line)", l)}
			}
			return c, i, nil
		}
		i++
	}
	if i == start {
		return c, 0, &patchError{line: lineNo, msg: "Update hunk does not contain any lines"}
	}
	return c, i, nil
}

// normalizeRunes maps typographic punctuation and odd spaces to ASCII, for
// the last fuzzy pass.
var normalizeRunes = strings.NewReplacer(
	"\u2010", "-", "\u2011", "-", "\u2012", "-", "\u2013", "-", "\u2014", "-", "\u2015", "-", "\u2212", "-",
	"\u2018", "'", "\u2019", "'", "\u201A", "'", "\u201B", "'",
	"\u201C", `"`, "\u201D", `"`, "\u201E", `"`, "\u201F", `"`,
	"\u00A0", " ", "\u2002", " ", "\u2003", " ", "\u2004", " ", "\u2005", " ", "\u2006", " ",
	"\u2007", " ", "\u2008", " ", "\u2009", " ", "\u200A", " ", "\u202F", " ", "\u205F", " ", "\u3000", " ",
)

var seekPasses = []func(string) string{
	func(s string) string { return s },
	func(s string) string { return strings.TrimRight(s, " \t\r\v\f") },
	strings.TrimSpace,
	func(s string) string { return normalizeRunes.Replace(strings.TrimSpace(s)) },
}

// seek finds pat in lines at or after start, trying exact, then
// trailing-whitespace-insensitive, then whitespace-insensitive, then
// punctuation-normalized matches. With eof it tries the end of the file
// first. It returns -1 when there is no match.
func seek(lines, pat []string, start int, eof bool) int {
	if len(pat) == 0 {
		return start
	}
	if len(pat) > len(lines) {
		return -1
	}
	last := len(lines) - len(pat)
	if eof && last >= start {
		for _, norm := range seekPasses {
			if matchAt(lines, pat, last, norm) {
				return last
			}
		}
	}
	for _, norm := range seekPasses {
		for i := start; i <= last; i++ {
			if matchAt(lines, pat, i, norm) {
				return i
			}
		}
	}
	return -1
}

func matchAt(lines, pat []string, at int, norm func(string) string) bool {
	for j, p := range pat {
		if norm(lines[at+j]) != norm(p) {
			return false
		}
	}
	return true
}

type replacement struct {
	start, n int
	lines    []string
}

// applyChunks computes a file's new content.
func applyChunks(path, content string, chunks []chunk) (string, error) {
	crlf := strings.Contains(content, "\r\n")
	lines := strings.Split(content, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSuffix(l, "\r")
	}
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	idx := 0
	var reps []replacement
	for _, c := range chunks {
		for _, ctx := range c.contexts {
			i := seek(lines, []string{ctx}, idx, false)
			if i < 0 {
				//lint:ignore ST1005 apply_patch's own words, which models know
				return "", fmt.Errorf("Failed to find context '%s' in %s", ctx, path)
			}
			idx = i + 1
		}
		if len(c.old) == 0 {
			at := len(lines)
			if len(c.contexts) > 0 {
				at = idx
			}
			reps = append(reps, replacement{at, 0, c.new})
			continue
		}
		pat, repl := c.old, c.new
		i := seek(lines, pat, idx, c.eof)
		if i < 0 && pat[len(pat)-1] == "" {
			pat = pat[:len(pat)-1]
			if len(repl) > 0 && repl[len(repl)-1] == "" {
				repl = repl[:len(repl)-1]
			}
			i = seek(lines, pat, idx, c.eof)
		}
		if i < 0 {
			//lint:ignore ST1005 apply_patch's own words, which models know
			return "", fmt.Errorf("Failed to find expected lines in %s:\n%s%s", path, strings.Join(c.old, "\n"), nearby(lines, c.old))
		}
		kept := make([]string, len(repl))
		for k, l := range repl {
			if j := c.ctxIdx[k]; j >= 0 && j < len(pat) {
				l = lines[i+j] // the file's own text of a context line
			}
			kept[k] = l
		}
		reps = append(reps, replacement{i, len(pat), kept})
		idx = i + len(pat)
	}
	slices.SortStableFunc(reps, func(a, b replacement) int { return a.start - b.start })
	for k := len(reps) - 1; k >= 0; k-- {
		r := reps[k]
		lines = slices.Replace(lines, r.start, r.start+r.n, r.lines...)
	}
	nl := "\n"
	if crlf {
		nl = "\r\n"
	}
	if len(lines) == 0 {
		return "", nil
	}
	return strings.Join(lines, nl) + nl, nil
}

// nearby shows, numbered, the region of the file around the best guess of
// where the expected lines were meant to be.
func nearby(lines, old []string) string {
	anchor := ""
	for _, l := range old {
		if strings.TrimSpace(l) != "" {
			anchor = strings.TrimSpace(l)
			break
		}
	}
	if anchor == "" {
		return ""
	}
	at := slices.IndexFunc(lines, func(l string) bool { return strings.TrimSpace(l) == anchor })
	if at < 0 {
		return ""
	}
	from, to := max(at-3, 0), min(at+len(old)+3, len(lines))
	var b strings.Builder
	fmt.Fprintf(&b, "\n\nThe file's lines %d-%d are:\n", from+1, to)
	for i := from; i < to; i++ {
		fmt.Fprintf(&b, "%4d | %s\n", i+1, lines[i])
	}
	return b.String()
}

func applyPatchTool() *tool {
	return &tool{
		name: "apply_patch",
		description: "Apply a patch in the v4a format to create, update, move or delete files. The patch starts with `*** Begin Patch` and ends with `*** End Patch`; " +
			"each file is an `*** Add File: path` (every line prefixed with +), `*** Delete File: path`, or `*** Update File: path` (optionally followed by `*** Move to: path`) " +
			"with chunks introduced by `@@` or `@@ <a line such as a class or function header>`, whose lines start with ' ' (context), '-' (removed) or '+' (added). " +
			"Give 3 lines of context above and below each change; use `*** End of File` after a chunk that ends at the end of the file. The patch applies wholly or not at all.",
		category: catWrite,
		schema: object([]string{"patch"}, map[string]*schema{
			"patch": str("Patch content in v4a format"),
		}),
		run: runApplyPatch,
	}
}

// patchFile is one file's state while a patch is computed.
type patchFile struct {
	path        string // as the sandbox is given it
	origExists  bool
	origContent string
	exists      bool
	content     string
}

func runApplyPatch(ctx context.Context, s *Set, _ Call, raw []byte) (output, error) {
	a, err := decode[struct {
		Patch string `json:"patch"`
	}](raw)
	if err != nil {
		return output{}, err
	}
	hunks, err := parsePatch(a.Patch)
	if err != nil {
		return output{}, invalidArgs("%v", err)
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()

	files := map[string]*patchFile{}
	var order []*patchFile
	load := func(p string) (*patchFile, error) {
		p = s.abs(p)
		if f, ok := files[p]; ok {
			return f, nil
		}
		f := &patchFile{path: p}
		data, err := s.readBytes(ctx, p)
		switch {
		case err == nil:
			f.origExists, f.exists = true, true
			f.origContent, f.content = string(data), string(data)
		case isNotFound(err):
		default:
			return nil, err
		}
		files[p] = f
		order = append(order, f)
		return f, nil
	}
	var report strings.Builder
	report.WriteString("Success. Updated the following files:\n")
	for _, h := range hunks {
		f, err := load(h.path)
		if err != nil {
			return output{}, patchFailed(err, h.path)
		}
		switch h.kind {
		case hunkAdd:
			f.exists, f.content = true, h.contents
			fmt.Fprintf(&report, "A %s\n", h.path)
		case hunkDelete:
			if !f.exists {
				return output{}, failed("Failed to delete file %s: it does not exist. No files were changed.", h.path)
			}
			f.exists, f.content = false, ""
			fmt.Fprintf(&report, "D %s\n", h.path)
		case hunkUpdate:
			if !f.exists {
				return output{}, failed("Failed to update file %s: it does not exist. No files were changed.", h.path)
			}
			updated, err := applyChunks(h.path, f.content, h.chunks)
			if err != nil {
				return output{}, failed("%v\nNo files were changed.", err)
			}
			if h.moveTo == "" {
				f.content = updated
				fmt.Fprintf(&report, "M %s\n", h.path)
				continue
			}
			dst, err := load(h.moveTo)
			if err != nil {
				return output{}, patchFailed(err, h.moveTo)
			}
			f.exists, f.content = false, ""
			dst.exists, dst.content = true, updated
			fmt.Fprintf(&report, "M %s\n", h.moveTo)
		}
	}
	if err := s.commitPatch(ctx, order); err != nil {
		return output{}, err
	}
	return ok(report.String())
}

func patchFailed(err error, p string) error {
	if _, ok := err.(*toolError); ok {
		return err
	}
	return fmt.Errorf("patch %s: %w", p, err)
}

// commitPatch writes the computed files (writes first, then deletes, so a
// move never loses its content). If an operation fails, the ones done are
// undone, best effort, and the error is returned.
func (s *Set) commitPatch(ctx context.Context, files []*patchFile) error {
	var done []*patchFile
	undo := func() {
		for _, f := range slices.Backward(done) {
			if f.origExists {
				_, _ = s.writeBytes(context.WithoutCancel(ctx), f.path, []byte(f.origContent))
			} else {
				_, _ = s.env.Sandbox.DeleteFile(context.WithoutCancel(ctx), &sandboxv1.DeleteFileRequest{SandboxId: s.env.SandboxID, Path: f.path})
			}
		}
	}
	for _, f := range files {
		if !f.exists || (f.origExists && f.content == f.origContent) {
			continue
		}
		if _, err := s.writeBytes(ctx, f.path, []byte(f.content)); err != nil {
			undo()
			return fmt.Errorf("write %s: %w", f.path, err)
		}
		done = append(done, f)
	}
	for _, f := range files {
		if f.exists || !f.origExists {
			continue
		}
		if _, err := s.env.Sandbox.DeleteFile(ctx, &sandboxv1.DeleteFileRequest{SandboxId: s.env.SandboxID, Path: f.path}); err != nil {
			undo()
			return fmt.Errorf("delete %s: %w", f.path, err)
		}
		done = append(done, f)
	}
	return nil
}
