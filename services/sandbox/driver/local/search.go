package local

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// searchTimeout bounds every search, as the agent tools expect.
const searchTimeout = 30 * time.Second

// maxLineBytes is how much of a matching line a result carries.
const maxLineBytes = 2000

// grepTarget is how the search programs name what Grep opened: the open
// file or directory itself, passed as fd 3, so a link swapped after the
// check cannot send them elsewhere (they follow links named on their
// command line).
const grepTarget = "/proc/self/fd/3"

// Grep implements driver.Searcher with ripgrep when the host has it, else
// POSIX grep, run directly (no shell) on the file or directory opened
// inside the root.
func (s *sandbox) Grep(ctx context.Context, o driver.GrepOptions) (driver.GrepResult, error) {
	reqPath := o.Path
	if reqPath == "" {
		reqPath = "."
	}
	rel, err := s.resolve(reqPath)
	if err != nil {
		return driver.GrepResult{}, err
	}
	// Opened once, through the root: what was checked is what is
	// searched. O_NONBLOCK: a FIFO must not hang the open.
	f, err := s.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return driver.GrepResult{}, fsErr(reqPath, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return driver.GrepResult{}, fsErr(reqPath, err)
	}
	if !fi.IsDir() && !fi.Mode().IsRegular() {
		return driver.GrepResult{}, fmt.Errorf("%w: %s is neither a regular file nor a directory", driver.ErrInvalid, reqPath)
	}
	backend := o.Backend
	if backend == driver.BackendAuto {
		backend = driver.BackendPOSIX
		if s.rg != "" {
			backend = driver.BackendRipgrep
		}
	}
	glob := o.GlobFilter
	if !fi.IsDir() && glob != "" {
		// The tools disagree on filters for a file named outright, so
		// apply it here.
		if !driver.MatchName(glob, path.Base(filepath.ToSlash(rel))) {
			return driver.GrepResult{Backend: backend}, nil
		}
		glob = ""
	}
	var prog string
	var args []string
	env := []string{"LC_ALL=C", "PATH=" + s.d.path}
	switch backend {
	case driver.BackendRipgrep:
		if s.rg == "" {
			return driver.GrepResult{}, fmt.Errorf("%w: ripgrep is not installed", driver.ErrUnsupported)
		}
		// Hidden and ignored files too, as grep -r searches them; no
		// symlink following (no -L). --no-unicode matches by bytes, as
		// grep does with LC_ALL=C (see driver.ValidatePattern). JSON:
		// any file name (a newline in it) and binary files are told
		// apart reliably.
		prog, args = s.rg, []string{"--no-config", "--hidden", "--no-ignore", "--no-messages", "--json", "--no-unicode"}
		if o.CaseInsensitive {
			args = append(args, "-i")
		}
		if glob != "" {
			args = append(args, "--glob", glob)
		}
		args = append(args, "-e", rgPattern(o.Pattern))
	case driver.BackendPOSIX:
		if s.grep == "" {
			return driver.GrepResult{}, fmt.Errorf("%w: neither ripgrep nor grep is installed", driver.ErrUnsupported)
		}
		// -r, not -R: symlinks below the path are not followed. -I skips
		// binary files as ripgrep does; -s hides unreadable files.
		prog, args = s.grep, []string{"-r", "-n", "-H", "-I", "-s", "--null", "-E"}
		if o.CaseInsensitive {
			args = append(args, "-i")
		}
		if glob != "" {
			args = append(args, "--include="+glob)
		}
		args = append(args, "-e", posixPattern(o.Pattern))
	default:
		return driver.GrepResult{}, fmt.Errorf("%w: unknown grep backend %d", driver.ErrInvalid, backend)
	}
	args = append(args, "--", grepTarget)

	ctx, cancel := context.WithTimeout(ctx, searchTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Dir, cmd.Env = s.dir, env
	cmd.ExtraFiles = []*os.File{f}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return driver.GrepResult{}, err
	}
	if err := cmd.Start(); err != nil {
		return driver.GrepResult{}, fmt.Errorf("start %s: %w", prog, err)
	}
	res := driver.GrepResult{Backend: backend}
	name := func(printed []byte) string {
		if !fi.IsDir() {
			return reqPath
		}
		return path.Join(reqPath, relBelow(grepTarget, path.Clean(string(printed))))
	}
	br := bufio.NewReaderSize(pipe, 64<<10)
	var parseErr error
	if backend == driver.BackendRipgrep {
		res.Truncated, parseErr = parseRgJSON(br, name, o.MaxResults, &res.Matches)
	} else {
		res.Truncated, parseErr = parseNull(br, name, o.MaxResults, &res.Matches)
	}
	if parseErr != nil {
		parseErr = fmt.Errorf("%s: %w", filepath.Base(prog), parseErr)
	}
	if res.Truncated || parseErr != nil {
		cancel() // enough: stop the search
	}
	io.Copy(io.Discard, pipe)
	werr := cmd.Wait()
	if ctx.Err() != nil && !res.Truncated && parseErr == nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) && context.Cause(ctx) == context.DeadlineExceeded {
			return driver.GrepResult{}, fmt.Errorf("grep ran past %s: %w", searchTimeout, context.DeadlineExceeded)
		}
		return driver.GrepResult{}, ctx.Err()
	}
	if parseErr != nil {
		return driver.GrepResult{}, parseErr
	}
	var ee *exec.ExitError
	if werr != nil && !res.Truncated && errors.As(werr, &ee) && ee.ExitCode() == 2 && len(res.Matches) == 0 && stderr.Len() > 0 {
		// File errors are silenced (-s, --no-messages), so what is left
		// is the tool refusing the pattern or the filter.
		return driver.GrepResult{}, fmt.Errorf("%w: %s refused it: %s", driver.ErrInvalidPattern, filepath.Base(prog), truncate(stderr.Bytes(), 500))
	}
	slices.SortFunc(res.Matches, func(a, b driver.GrepMatch) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return int(a.Line - b.Line)
	})
	return res, nil
}

// parseNull reads grep's "path\0line:text\n" records. The name is read up
// to its NUL, so a newline in a file name is part of the name. It reports
// whether max was reached with more to come.
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
			return false, fmt.Errorf("printed an unparseable record %q", truncate(rest, 200))
		}
		if len(*out) == max {
			return true, nil
		}
		*out = append(*out, newMatch(name(printed[:len(printed)-1]), line, text))
	}
}

// rgData is the text or bytes of one field of ripgrep's JSON output.
type rgData struct {
	Text  *string `json:"text"`
	Bytes []byte  `json:"bytes"` // base64 in the JSON
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

// parseRgJSON reads ripgrep's --json messages. A file's matches count once
// its "end" says it is not binary: a binary file gives none, as grep -I
// and ripgrep's own directory search skip binary files (a file named
// outright is otherwise searched and its NUL bytes printed).
func parseRgJSON(br *bufio.Reader, name func([]byte) string, max int, out *[]driver.GrepMatch) (bool, error) {
	var pending []driver.GrepMatch
	for {
		rec, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(rec)) > 0 {
			var m rgMessage
			if jerr := json.Unmarshal(rec, &m); jerr != nil {
				return false, fmt.Errorf("printed an unparseable message %q: %v", truncate(rec, 200), jerr)
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

// rgPattern writes the pattern's non-ASCII bytes as \xHH escapes, which
// ripgrep in --no-unicode mode matches as raw bytes, as grep does in the C
// locale.
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

// Glob implements driver.Searcher by walking the root.
func (s *sandbox) Glob(ctx context.Context, pattern, dir string) ([]string, error) {
	rel, err := s.resolve(dir)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, searchTimeout)
	defer cancel()
	// Without "**" no match lies deeper than the pattern's segments.
	maxDepth := 0
	if !slices.Contains(strings.Split(pattern, "/"), "**") {
		maxDepth = strings.Count(pattern, "/") + 1
	}
	var out []string
	err = s.walk(ctx, rel, maxDepth, nil, func(name string, _ fs.DirEntry) {
		if driver.MatchGlob(pattern, name) {
			out = append(out, name)
		}
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(out)
	return out, nil
}

// Walk implements driver.Searcher.
func (s *sandbox) Walk(ctx context.Context, dir string, maxDepth int, exclude []string) ([]driver.WalkedFile, error) {
	rel, err := s.resolve(dir)
	if err != nil {
		return nil, err
	}
	fi, err := s.root.Lstat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, fsErr(dir, err)
	case !fi.IsDir():
		return nil, fmt.Errorf("%w: %s (a symbolic link is not walked)", driver.ErrNotDirectory, dir)
	}
	ctx, cancel := context.WithTimeout(ctx, searchTimeout)
	defer cancel()
	var out []driver.WalkedFile
	err = s.walk(ctx, rel, maxDepth, exclude, func(name string, d fs.DirEntry) {
		if info, err := d.Info(); err == nil {
			out = append(out, driver.WalkedFile{Path: name, Size: info.Size()})
		}
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b driver.WalkedFile) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// walk calls fn for every regular file below rel with its path relative to
// rel, down to maxDepth (0: no limit), pruning directories named in exclude.
// A missing rel gives nothing.
func (s *sandbox) walk(ctx context.Context, rel string, maxDepth int, exclude []string, fn func(string, fs.DirEntry)) error {
	top := filepath.ToSlash(rel)
	err := fs.WalkDir(s.root.FS(), top, func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			if name == top && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			if name == top {
				return err
			}
			return nil // unreadable below the top: skip it
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if name == top {
			return nil
		}
		below := relBelow(top, name)
		depth := strings.Count(below, "/") + 1
		if d.IsDir() {
			if slices.Contains(exclude, d.Name()) || (maxDepth > 0 && depth >= maxDepth) {
				return fs.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() {
			fn(below, d)
		}
		return nil
	})
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("search ran past %s: %w", searchTimeout, err)
	}
	if err != nil {
		return fsErr(top, err)
	}
	return nil
}
