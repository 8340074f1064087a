package daytona

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

func randomID() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// fileDTO is one entry as the helper reports it.
type fileDTO struct {
	Path  string `json:"path"`
	Type  string `json:"type"`
	Size  int64  `json:"size"`
	Mode  uint32 `json:"mode"`
	MTime int64  `json:"mtime"`
}

func (f fileDTO) info() driver.FileInfo {
	t := map[string]driver.FileType{"file": driver.TypeFile, "dir": driver.TypeDirectory, "link": driver.TypeSymlink}[f.Type]
	if t == 0 {
		t = driver.TypeOther
	}
	return driver.FileInfo{Path: f.Path, Type: t, Size: f.Size, Mode: f.Mode, ModTime: time.Unix(f.MTime, 0)}
}

// Open implements driver.Files: the helper confines and checks the path,
// then files/download fetches what it resolved.
func (s *sandbox) Open(ctx context.Context, p string, offset int64) (io.ReadCloser, int64, error) {
	var o struct {
		Real string `json:"real"`
		Size int64  `json:"size"`
	}
	if err := s.helper(ctx, map[string]any{"op": "open", "path": p}, &o); err != nil {
		return nil, 0, err
	}
	var body io.ReadCloser
	err := s.call(ctx, request{op: "download", method: http.MethodGet, path: s.toolbox("/files/download"),
		query: url.Values{"path": {o.Real}}, raw: &body, notFound: fmt.Errorf("%w: %s", driver.ErrNotFound, p)})
	if err != nil {
		return nil, 0, err
	}
	if offset > 0 {
		if _, err := io.CopyN(io.Discard, body, offset); err != nil && err != io.EOF {
			body.Close()
			return nil, 0, err
		}
	}
	return body, o.Size, nil
}

// WriteFile implements driver.Files: the data is uploaded beside the
// helper, which moves it into place (keeping an existing file's mode).
func (s *sandbox) WriteFile(ctx context.Context, p string, data []byte) (bool, error) {
	if err := checkPath(p); err != nil {
		return false, err
	}
	src := s.dir + "/up-" + randomID()
	if err := s.upload(ctx, src, data); err != nil {
		return false, err
	}
	var w struct {
		Created bool `json:"created"`
	}
	err := s.helper(ctx, map[string]any{"op": "write", "path": p, "src": src}, &w)
	return w.Created, err
}

// checkPath refuses what no helper call needs to see.
func checkPath(p string) error {
	if bytes.IndexByte([]byte(p), 0) >= 0 {
		return fmt.Errorf("%w: path contains NUL", driver.ErrInvalid)
	}
	return nil
}

// Remove implements driver.Files.
func (s *sandbox) Remove(ctx context.Context, p string, recursive bool) error {
	return s.helper(ctx, map[string]any{"op": "remove", "path": p, "recursive": recursive}, &struct{}{})
}

// Stat implements driver.Files.
func (s *sandbox) Stat(ctx context.Context, p string) (driver.FileInfo, error) {
	var f fileDTO
	if err := s.helper(ctx, map[string]any{"op": "stat", "path": p}, &f); err != nil {
		return driver.FileInfo{}, err
	}
	fi := f.info()
	fi.Path = p
	return fi, nil
}

// ListDir implements driver.Files.
func (s *sandbox) ListDir(ctx context.Context, p string, depth int) ([]driver.FileInfo, error) {
	var l struct {
		Entries []fileDTO `json:"entries"`
	}
	if err := s.helper(ctx, map[string]any{"op": "list", "path": p, "depth": max(depth, 1)}, &l); err != nil {
		return nil, err
	}
	out := make([]driver.FileInfo, 0, len(l.Entries))
	for _, e := range l.Entries {
		out = append(out, e.info())
	}
	return out, nil
}

// Rename implements driver.Files.
func (s *sandbox) Rename(ctx context.Context, from, to string) error {
	return s.helper(ctx, map[string]any{"op": "rename", "from": from, "to": to}, &struct{}{})
}

// Mkdir implements driver.Files.
func (s *sandbox) Mkdir(ctx context.Context, p string) (bool, error) {
	var m struct {
		Created bool `json:"created"`
	}
	err := s.helper(ctx, map[string]any{"op": "mkdir", "path": p}, &m)
	return m.Created, err
}

// remove deletes a file of the driver's own (files, DELETE).
func (s *sandbox) removeOwn(ctx context.Context, path string) {
	s.d.c.do(ctx, request{op: "delete file", method: http.MethodDelete, path: s.toolbox("/files"), query: url.Values{"path": {path}}})
}
