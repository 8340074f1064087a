// Package fake is an in-memory sandbox driver for other services' tests:
// files live in a map, commands return scripted results, and everything a
// test may want to check afterwards (commands run, files written and
// deleted) is recorded. It runs no processes and touches no disk.
package fake

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/fabro-sh/fabro-go/services/sandbox/driver"
)

// Root is every fake sandbox's root and working directory.
const Root = "/workspace"

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

// Capabilities implements driver.Driver: no live streaming and no cancel,
// since scripted commands end at once.
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

func (s *Sandbox) put(rel string, b []byte) {
	s.files[rel] = b
	for d := path.Dir(rel); ; d = path.Dir(d) {
		s.dirs[d] = true
		if d == "." {
			break
		}
	}
}

// Info implements driver.Sandbox.
func (s *Sandbox) Info() driver.Info {
	return driver.Info{Capabilities: s.d.Capabilities(), Platform: "linux", OSVersion: "fake", WorkingDirectory: Root, RootDirectory: Root}
}

// Delete implements driver.Sandbox.
func (s *Sandbox) Delete(context.Context) error { return nil }

func resolve(p string) (string, error) {
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
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dirs[rel] {
		return false, fmt.Errorf("%w: %s", driver.ErrIsDirectory, p)
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
	for f := range s.files {
		if strings.HasPrefix(f, rel+"/") {
			if !recursive {
				return fmt.Errorf("%w: %s", driver.ErrNotEmpty, p)
			}
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

// under returns name relative to dir when it lies strictly below it.
func under(dir, name string) (string, bool) {
	if dir == "." {
		return name, name != "."
	}
	return strings.CutPrefix(name, dir+"/")
}

// Rename implements driver.Files (files only).
func (s *Sandbox) Rename(_ context.Context, from, to string) error {
	rf, err := resolve(from)
	if err != nil {
		return err
	}
	rt, err := resolve(to)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.files[rf]
	if !ok {
		return fmt.Errorf("%w: %s (the fake renames files only)", driver.ErrNotFound, from)
	}
	delete(s.files, rf)
	s.put(rt, b)
	return nil
}

// Mkdir implements driver.Files.
func (s *Sandbox) Mkdir(_ context.Context, p string) (bool, error) {
	rel, err := resolve(p)
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for d := rel; d != "."; d = path.Dir(d) {
		if _, ok := s.files[d]; ok {
			return false, fmt.Errorf("%w: %s", driver.ErrExists, d)
		}
	}
	if s.dirs[rel] {
		return false, nil
	}
	s.put(path.Join(rel, "x"), nil)
	delete(s.files, path.Join(rel, "x"))
	return true, nil
}

// Exec implements driver.Execer with the driver's script.
func (s *Sandbox) Exec(_ context.Context, spec driver.ExecSpec, out driver.Output) (driver.ExecResult, error) {
	s.mu.Lock()
	s.commands = append(s.commands, spec)
	s.mu.Unlock()
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
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.files[rel]; !ok && !s.dirs[rel] {
		return driver.GrepResult{}, fmt.Errorf("%w: %s", driver.ErrNotFound, o.Path)
	}
	res := driver.GrepResult{Backend: driver.BackendPOSIX}
	for _, f := range slices.Sorted(mapKeys(s.files)) {
		below, ok := under(rel, f)
		if f == rel {
			below, ok = "", true
		}
		if m, _ := path.Match(o.GlobFilter, path.Base(f)); !ok || (o.GlobFilter != "" && !m) {
			continue
		}
		for i, line := range strings.Split(strings.TrimSuffix(string(s.files[f]), "\n"), "\n") {
			if !re.MatchString(line) {
				continue
			}
			if len(res.Matches) == o.MaxResults {
				res.Truncated = true
				return res, nil
			}
			res.Matches = append(res.Matches, driver.GrepMatch{Path: path.Join(cmpOr(o.Path, "."), below), Line: int64(i + 1), Text: line})
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

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
