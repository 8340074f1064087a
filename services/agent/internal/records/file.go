package records

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
)

// File keeps each record in <dir>/<session_id>.pb, written atomically
// (a temporary file renamed over it). It serves one process: revisions are
// counted in that process's memory, from 1 for a record found on disk, so a
// compare-and-set holds between the process's own writers only.
type File struct {
	dir string

	mu   sync.Mutex
	revs map[string]Revision // known revisions; a missing id is read from disk
}

var _ Store = (*File)(nil)

// NewFile opens (creating) the directory; it reads no record.
func NewFile(dir string) (*File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("records: %w", err)
	}
	return &File{dir: dir, revs: map[string]Revision{}}, nil
}

func (f *File) path(id string) string { return filepath.Join(f.dir, id+".pb") }

// validID keeps ids to one path element.
func validID(id string) error {
	if id == "" || strings.ContainsAny(id, `/\`) || id == "." || id == ".." {
		return fmt.Errorf("%w: bad session id %q", ErrNotFound, id)
	}
	return nil
}

// revision is the stored revision of id (0: none); f.mu held.
func (f *File) revision(id string) Revision {
	if r, ok := f.revs[id]; ok {
		return r
	}
	if _, err := os.Stat(f.path(id)); err == nil {
		f.revs[id] = 1
		return 1
	}
	return 0
}

// Get implements Store.
func (f *File) Get(_ context.Context, id string) (*agentv1.SessionRecord, Revision, error) {
	if err := validID(id); err != nil {
		return nil, 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := os.ReadFile(f.path(id))
	if errors.Is(err, os.ErrNotExist) {
		delete(f.revs, id)
		return nil, 0, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("records: %w", err)
	}
	rec, err := Decode(b)
	if err != nil {
		return nil, 0, err
	}
	return rec, f.revision(id), nil
}

// Put implements Store.
func (f *File) Put(_ context.Context, rec *agentv1.SessionRecord, expected Revision) (Revision, error) {
	id := rec.GetSession().GetSessionId()
	if err := validID(id); err != nil {
		return 0, err
	}
	b, err := Encode(rec)
	if err != nil {
		return 0, fmt.Errorf("records: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	cur := f.revision(id)
	if expected != Any && expected != cur {
		return 0, fmt.Errorf("%w: %s is at revision %d, not %d", ErrConflict, id, cur, expected)
	}
	tmp := f.path(id) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return 0, fmt.Errorf("records: %w", err)
	}
	if err := os.Rename(tmp, f.path(id)); err != nil {
		return 0, fmt.Errorf("records: %w", err)
	}
	f.revs[id] = cur + 1
	return cur + 1, nil
}

// Delete implements Store.
func (f *File) Delete(_ context.Context, id string) error {
	if err := validID(id); err != nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.revs, id)
	if err := os.Remove(f.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("records: %w", err)
	}
	return nil
}

// List implements Store. It reads the directory's names, not the records.
func (f *File) List(_ context.Context, before string, limit int) ([]string, error) {
	d, err := os.Open(f.dir)
	if err != nil {
		return nil, fmt.Errorf("records: %w", err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, fmt.Errorf("records: %w", err)
	}
	ids := make([]string, 0, len(names))
	for _, n := range names {
		if id, ok := strings.CutSuffix(n, ".pb"); ok && (before == "" || id < before) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	slices.Reverse(ids)
	if limit >= 0 && len(ids) > limit {
		ids = ids[:limit]
	}
	return ids, nil
}
