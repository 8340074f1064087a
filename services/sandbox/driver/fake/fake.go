// Package fake is an in-memory sandbox driver for other services' tests:
// files live in a map, commands return scripted results, and everything a
// test may want to check afterwards (commands run, files written and
// deleted) is recorded. It runs no processes and touches no disk.
//
// Its files and search behave like the local driver's and pass drivertest's
// files and search suites; it states no Commands capability, so the exec
// suite is skipped. What an in-memory model cannot have it lacks: symbolic
// links, permission bits (files are 0644, directories 0755) and times. Its
// grep uses Go's regexp, which is UTF-8 aware where the real back ends
// match by bytes: "." matches a whole rune and case folding is Unicode's,
// so non-ASCII text may match differently.
package fake

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// Root is every fake sandbox's root and working directory.
const Root = "/workspace"

// maxLineBytes is how much of a matching line a result carries, as the
// local driver does.
const maxLineBytes = 2000

// Driver is the fake driver, named "fake".
type Driver struct {
	mu sync.Mutex
	// Exec, when set, decides every command's result; otherwise commands
	// exit 0 with no output.
	Exec func(spec driver.ExecSpec) driver.ExecResult
	// Seed files (path relative to Root) every new sandbox starts with.
	Seed      map[string]string
	sandboxes []*Sandbox
}

var _ driver.Driver = (*Driver)(nil)

// Name implements driver.Driver.
func (d *Driver) Name() string { return "fake" }

// Capabilities implements driver.Driver: scripted commands (no Commands),
// which end at once (no live streaming, no cancel); a script can see stdin
// and give stdout and stderr apart.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Isolation: driver.IsolationNone, StreamsSeparated: true, Stdin: true}
}

// Available implements driver.Driver.
func (d *Driver) Available(context.Context) error { return nil }

// Create implements driver.Driver.
func (d *Driver) Create(_ context.Context, spec driver.Spec) (driver.Sandbox, error) {
	s := &Sandbox{d: d, files: map[string][]byte{}, dirs: map[string]bool{".": true}}
	for p, c := range d.Seed {
		s.put(path.Clean(p), []byte(c))
	}
	d.mu.Lock()
	d.sandboxes = append(d.sandboxes, s)
	d.mu.Unlock()
	return s, nil
}

// Sandboxes returns the sandboxes created so far, oldest first.
func (d *Driver) Sandboxes() []*Sandbox {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.sandboxes)
}

// Sandbox is one fake sandbox.
type Sandbox struct {
	d     *Driver
	mu    sync.Mutex
	files map[string][]byte // relative path -> content
	dirs  map[string]bool

	commands []driver.ExecSpec
	written  []string
	deleted  []string
}

// Commands returns the commands run, in order.
func (s *Sandbox) Commands() []driver.ExecSpec {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.commands)
}

// Written returns the paths written, in order, relative to Root.
func (s *Sandbox) Written() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.written)
}

// Deleted returns the paths removed, in order, relative to Root.
func (s *Sandbox) Deleted() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.deleted)
}

// File returns a file's content.
func (s *Sandbox) File(p string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.files[path.Clean(p)]
	return string(b), ok
}

// fileParent returns the first parent of rel that is a file, or "".
func (s *Sandbox) fileParent(rel string) string {
	for d := path.Dir(rel); d != "."; d = path.Dir(d) {
		if _, ok := s.files[d]; ok {
			return d
		}
	}
	return ""
}

func (s *Sandbox) put(rel string, b []byte) {
	s.files[rel] = b
	s.mkdirs(path.Dir(rel))
}

// Info implements driver.Sandbox.
func (s *Sandbox) Info() driver.Info {
	return driver.Info{Capabilities: s.d.Capabilities(), Platform: "linux", OSVersion: "fake", WorkingDirectory: Root, RootDirectory: Root}
}

// Delete implements driver.Sandbox.
func (s *Sandbox) Delete(context.Context) error { return nil }

func resolve(p string) (string, error) {
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("%w: path contains NUL", driver.ErrInvalid)
	}
	if p == "" {
		p = "."
	}
	if path.IsAbs(p) {
		if p != Root && !strings.HasPrefix(p, Root+"/") {
			return "", fmt.Errorf("%w: %s", driver.ErrPathEscapes, p)
		}
		p = "." + strings.TrimPrefix(p, Root)
	}
	rel := path.Clean(p)
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("%w: %s", driver.ErrPathEscapes, p)
	}
	return rel, nil
}

// Open implements driver.Files.
func (s *Sandbox) Open(_ context.Context, p string, offset int64) (io.ReadCloser, int64, error) {
	rel, err := resolve(p)
	if err != nil {
		return nil, 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.files[rel]
	switch {
	case s.dirs[rel]:
		return nil, 0, fmt.Errorf("%w: %s", driver.ErrIsDirectory, p)
	case !ok:
		return nil, 0, fmt.Errorf("%w: %s", driver.ErrNotFound, p)
	}
	return io.NopCloser(bytes.NewReader(b[min(offset, int64(len(b))):])), int64(len(b)), nil
}

// WriteFile implements driver.Files.
func (s *Sandbox) WriteFile(_ context.Context, p string, data []byte) (bool, error) {
	rel, err := resolve(p)
	if err != nil {
		return false, err
	}
	if rel == "." {
		return false, fmt.Errorf("%w: %s", driver.ErrIsDirectory, p)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dirs[rel] {
		return false, fmt.Errorf("%w: %s", driver.ErrIsDirectory, p)
	}
	if f := s.fileParent(rel); f != "" {
		return false, fmt.Errorf("%w: %s (or one of its parents)", driver.ErrNotDirectory, p)
	}
	_, existed := s.files[rel]
	s.put(rel, slices.Clone(data))
	s.written = append(s.written, rel)
	return !existed, nil
}

// Remove implements driver.Files.
func (s *Sandbox) Remove(_ context.Context, p string, recursive bool) error {
	rel, err := resolve(p)
	if err != nil {
		return err
	}
	if rel == "." {
		return fmt.Errorf("%w: the root", driver.ErrPathEscapes)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.files[rel]; ok {
		delete(s.files, rel)
		s.deleted = append(s.deleted, rel)
		return nil
	}
	if !s.dirs[rel] {
		return fmt.Errorf("%w: %s", driver.ErrNotFound, p)
	}
	if !recursive && s.hasChildren(rel) {
		return fmt.Errorf("%w: %s", driver.ErrNotEmpty, p)
	}
	for f := range s.files {
		if strings.HasPrefix(f, rel+"/") {
			delete(s.files, f)
		}
	}
	for d := range s.dirs {
		if d == rel || strings.HasPrefix(d, rel+"/") {
			delete(s.dirs, d)
		}
	}
	s.deleted = append(s.deleted, rel)
	return nil
}

// Stat implements driver.Files.
func (s *Sandbox) Stat(_ context.Context, p string) (driver.FileInfo, error) {
	rel, err := resolve(p)
	if err != nil {
		return driver.FileInfo{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.files[rel]; ok {
		return driver.FileInfo{Path: p, Type: driver.TypeFile, Size: int64(len(b)), Mode: 0o644}, nil
	}
	if s.dirs[rel] {
		return driver.FileInfo{Path: p, Type: driver.TypeDirectory, Mode: 0o755}, nil
	}
	return driver.FileInfo{}, fmt.Errorf("%w: %s", driver.ErrNotFound, p)
}

// ListDir implements driver.Files.
func (s *Sandbox) ListDir(_ context.Context, p string, depth int) ([]driver.FileInfo, error) {
	rel, err := resolve(p)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.dirs[rel] {
		if _, ok := s.files[rel]; ok {
			return nil, fmt.Errorf("%w: %s", driver.ErrNotDirectory, p)
		}
		return nil, fmt.Errorf("%w: %s", driver.ErrNotFound, p)
	}
	var out []driver.FileInfo
	add := func(name string, fi driver.FileInfo) {
		below, ok := under(rel, name)
		if ok && strings.Count(below, "/") < depth {
			fi.Path = below
			out = append(out, fi)
		}
	}
	for f, b := range s.files {
		add(f, driver.FileInfo{Type: driver.TypeFile, Size: int64(len(b)), Mode: 0o644})
	}
	for d := range s.dirs {
		add(d, driver.FileInfo{Type: driver.TypeDirectory, Mode: 0o755})
	}
	// Segment by segment, as a directory walk lists them.
	slices.SortFunc(out, func(a, b driver.FileInfo) int {
		return strings.Compare(strings.ReplaceAll(a.Path, "/", "\x00"), strings.ReplaceAll(b.Path, "/", "\x00"))
	})
	return out, nil
}

// hasChildren reports whether directory rel has any entry.
func (s *Sandbox) hasChildren(rel string) bool {
	for f := range s.files {
		if _, ok := under(rel, f); ok {
			return true
		}
	}
	for d := range s.dirs {
		if _, ok := under(rel, d); ok {
			return true
		}
	}
	return false
}

// under returns name relative to dir when it lies strictly below it.
func under(dir, name string) (string, bool) {
	if dir == "." {
		return name, name != "."
	}
	return strings.CutPrefix(name, dir+"/")
}

// Rename implements driver.Files as the local driver does: a file replaces
// a file, an existing directory is never replaced, and a directory cannot
// move into itself.
func (s *Sandbox) Rename(_ context.Context, from, to string) error {
	rf, err := resolve(from)
	if err != nil {
		return err
	}
	rt, err := resolve(to)
	if err != nil {
		return err
	}
	if rf == "." || rt == "." {
		return fmt.Errorf("%w: cannot move the root", driver.ErrPathEscapes)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, isFile := s.files[rf]
	if !isFile && !s.dirs[rf] {
		return fmt.Errorf("%w: %s", driver.ErrNotFound, from)
	}
	if rf == rt {
		return nil
	}
	if _, ok := under(rf, rt); ok && !isFile {
		return fmt.Errorf("%w: cannot move %s into itself", driver.ErrNotEmpty, from)
	}
	if s.fileParent(rt) != "" {
		return fmt.Errorf("%w: %s (or one of its parents)", driver.ErrNotDirectory, to)
	}
	_, toFile := s.files[rt]
	switch {
	case s.dirs[rt]:
		return fmt.Errorf("%w: %s is an existing directory", driver.ErrIsDirectory, to)
	case !isFile && toFile:
		return fmt.Errorf("%w: %s", driver.ErrNotDirectory, to)
	}
	if isFile {
		delete(s.files, rf)
		s.put(rt, b)
		return nil
	}
	delete(s.dirs, rt)
	s.mkdirs(rt)
	move := func(name string) (string, bool) {
		if name == rf {
			return rt, true
		}
		if below, ok := under(rf, name); ok {
			return path.Join(rt, below), true
		}
		return "", false
	}
	for f, c := range maps.Clone(s.files) {
		if n, ok := move(f); ok {
			delete(s.files, f)
			s.files[n] = c
		}
	}
	for d := range maps.Clone(s.dirs) {
		if n, ok := move(d); ok {
			delete(s.dirs, d)
			s.dirs[n] = true
		}
	}
	return nil
}

// mkdirs records rel and its parents as directories.
func (s *Sandbox) mkdirs(rel string) {
	for d := rel; ; d = path.Dir(d) {
		s.dirs[d] = true
		if d == "." {
			return
		}
	}
}

// Mkdir implements driver.Files.
func (s *Sandbox) Mkdir(_ context.Context, p string) (bool, error) {
	rel, err := resolve(p)
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.files[rel]; ok || s.fileParent(rel) != "" {
		return false, fmt.Errorf("%w: %s (or one of its parents)", driver.ErrExists, p)
	}
	if s.dirs[rel] {
		return false, nil
	}
	s.mkdirs(rel)
	return true, nil
}

// Exec implements driver.Execer with the driver's script.
func (s *Sandbox) Exec(_ context.Context, spec driver.ExecSpec, out driver.Output) (driver.ExecResult, error) {
	rel, err := resolve(spec.Dir)
	if err != nil {
		return driver.ExecResult{}, err
	}
	s.mu.Lock()
	_, isFile := s.files[rel]
	isDir := s.dirs[rel]
	if isDir {
		s.commands = append(s.commands, spec)
	}
	s.mu.Unlock()
	switch {
	case isFile:
		return driver.ExecResult{}, fmt.Errorf("%w: working_dir %s", driver.ErrNotDirectory, spec.Dir)
	case !isDir:
		return driver.ExecResult{}, fmt.Errorf("%w: working_dir %s", driver.ErrNotFound, spec.Dir)
	}
	zero := 0
	res := driver.ExecResult{Termination: driver.Exited, ExitCode: &zero}
	if s.d.Exec != nil {
		res = s.d.Exec(spec)
	}
	res.StreamsSeparated = true
	res.StdoutStats = driver.CaptureStats{Observed: int64(len(res.Stdout)), Retained: int64(len(res.Stdout)), Head: int64(len(res.Stdout))}
	res.StderrStats = driver.CaptureStats{Observed: int64(len(res.Stderr)), Retained: int64(len(res.Stderr)), Head: int64(len(res.Stderr))}
	if out != nil {
		out.Started()
		if len(res.Stdout) > 0 {
			out.Chunk(driver.Stdout, res.Stdout)
		}
		if len(res.Stderr) > 0 {
			out.Chunk(driver.Stderr, res.Stderr)
		}
	}
	return res, nil
}

// Grep implements driver.Searcher with Go's regexp over the files.
func (s *Sandbox) Grep(_ context.Context, o driver.GrepOptions) (driver.GrepResult, error) {
	rel, err := resolve(o.Path)
	if err != nil {
		return driver.GrepResult{}, err
	}
	pat := o.Pattern
	if o.CaseInsensitive {
		pat = "(?i)" + pat
	}
	re, err := regexp.Compile(pat)
	if err != nil {
		return driver.GrepResult{}, fmt.Errorf("%w: %v", driver.ErrInvalidPattern, err)
	}
	if o.Backend == driver.BackendRipgrep {
		return driver.GrepResult{}, fmt.Errorf("%w: the fake has no ripgrep", driver.ErrUnsupported)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.files[rel]; !ok && !s.dirs[rel] {
		return driver.GrepResult{}, fmt.Errorf("%w: %s", driver.ErrNotFound, o.Path)
	}
	res := driver.GrepResult{Backend: driver.BackendPOSIX}
	for _, f := range slices.Sorted(maps.Keys(s.files)) {
		below, ok := under(rel, f)
		if f == rel {
			below, ok = "", true
		}
		if m, _ := path.Match(o.GlobFilter, path.Base(f)); !ok || (o.GlobFilter != "" && !m) {
			continue
		}
		content := s.files[f]
		if bytes.IndexByte(content, 0) >= 0 {
			continue // binary, as both real back ends skip it
		}
		for i, line := range bytes.Split(bytes.TrimSuffix(content, []byte("\n")), []byte("\n")) {
			if !re.Match(line) {
				continue
			}
			if len(res.Matches) == o.MaxResults {
				res.Truncated = true
				return res, nil
			}
			m := driver.GrepMatch{Path: path.Join(cmpOr(o.Path, "."), below), Line: int64(i + 1)}
			if len(line) > maxLineBytes {
				cut := maxLineBytes
				for cut > 0 && !utf8.RuneStart(line[cut]) {
					cut--
				}
				line, m.TextTruncated = line[:cut], true
			}
			m.Text = strings.ToValidUTF8(string(line), "\uFFFD")
			res.Matches = append(res.Matches, m)
		}
	}
	return res, nil
}

// Glob implements driver.Searcher.
func (s *Sandbox) Glob(_ context.Context, pattern, dir string) ([]string, error) {
	rel, err := resolve(dir)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for f := range s.files {
		if below, ok := under(rel, f); ok && driver.MatchGlob(pattern, below) {
			out = append(out, below)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Walk implements driver.Searcher.
func (s *Sandbox) Walk(_ context.Context, dir string, maxDepth int, exclude []string) ([]driver.WalkedFile, error) {
	rel, err := resolve(dir)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.files[rel]; ok {
		return nil, fmt.Errorf("%w: %s", driver.ErrNotDirectory, dir)
	}
	var out []driver.WalkedFile
	for f, b := range s.files {
		below, ok := under(rel, f)
		segs := strings.Split(below, "/")
		if !ok || (maxDepth > 0 && len(segs) > maxDepth) || slices.ContainsFunc(segs[:len(segs)-1], func(x string) bool { return slices.Contains(exclude, x) }) {
			continue
		}
		out = append(out, driver.WalkedFile{Path: below, Size: int64(len(b))})
	}
	slices.SortFunc(out, func(a, b driver.WalkedFile) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
