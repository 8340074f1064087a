package auth

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// StoreVersion is the version of the store file format.
const StoreVersion = 1

// ErrNotFound: no token has the id given.
var ErrNotFound = errors.New("auth: no such token")

// File is the store file's JSON form:
//
//	{"version": 1, "tokens": [{"id": "3f9c0a1b2c3d4e5f", "name": "admin",
//	  "role": "admin", "sha256": "<64 hex digits>", "created": "<RFC 3339>"}]}
//
// It holds hashes only, never a token value, and is written 0600 by atomic
// rename, so readers see either the old file or the new one.
type File struct {
	Version int     `json:"version"`
	Tokens  []Entry `json:"tokens"`
}

// Entry is one token in the store file.
type Entry struct {
	ID      string    `json:"id"`
	Name    string    `json:"name"`
	Role    Role      `json:"role"`
	SHA256  string    `json:"sha256"`
	Created time.Time `json:"created"`
	// Policy is the LLM gateway's governance of the token; nil: none.
	Policy *Policy `json:"policy,omitempty"`
}

// Store is the token store file. Verify re-checks the file with one stat per
// call and re-reads it when it changed, so a token revoked by another process
// is refused on its next use. Writers serialize with an flock on a lock file
// beside the store.
type Store struct {
	path string
	now  func() time.Time

	mu  sync.Mutex // serializes reloads and writes in this process
	cur atomic.Pointer[snapshot]

	chMu    sync.Mutex
	changed chan struct{} // closed at the next publish (Changed)
}

type snapshot struct {
	ident fileIdent
	byID  map[string]verifyEntry
	err   error // the file could not be read: every token is refused
}

type verifyEntry struct {
	p      Principal
	hash   [sha256.Size]byte
	policy *Policy
}

// fileIdent tells whether the file changed since it was read: a rename gives
// a new inode, an in-place write a new size or modification time.
type fileIdent struct {
	exists bool
	ino    uint64
	size   int64
	mtime  int64
}

// OpenStore returns the store at path; the file need not exist yet (no token
// is then valid, until it appears).
func OpenStore(path string) *Store {
	s := &Store{path: path, now: time.Now}
	s.cur.Store(&snapshot{ident: fileIdent{ino: ^uint64(0)}})
	return s
}

// Path is the store file's path.
func (s *Store) Path() string { return s.path }

func identOf(path string) (fileIdent, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return fileIdent{}, nil
	}
	if err != nil {
		return fileIdent{}, err
	}
	id := fileIdent{exists: true, size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.ino = st.Ino
	}
	return id, nil
}

// current returns the snapshot of the file as it is now.
func (s *Store) current() *snapshot {
	ident, err := identOf(s.path)
	snap := s.cur.Load()
	if err == nil && snap.ident == ident {
		return snap
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if snap = s.cur.Load(); err == nil && snap.ident == ident {
		return snap
	}
	snap = s.load()
	s.publish(snap)
	return snap
}

// load reads the file; s.mu is held.
func (s *Store) load() *snapshot {
	ident, err := identOf(s.path)
	if err != nil {
		return &snapshot{err: fmt.Errorf("auth: stat token store: %w", err)}
	}
	snap := &snapshot{ident: ident, byID: map[string]verifyEntry{}}
	if !ident.exists {
		return snap
	}
	f, err := readFile(s.path)
	if err != nil {
		return &snapshot{ident: ident, err: err}
	}
	for _, e := range f.Tokens {
		var h [sha256.Size]byte
		if b, err := hex.DecodeString(e.SHA256); err != nil || len(b) != len(h) || !e.Role.valid() {
			return &snapshot{ident: ident, err: fmt.Errorf("auth: token store %s: entry %q is malformed", s.path, e.ID)}
		} else {
			copy(h[:], b)
		}
		snap.byID[e.ID] = verifyEntry{p: Principal{Name: e.Name, Role: e.Role, TokenID: e.ID}, hash: h, policy: e.Policy}
	}
	return snap
}

func readFile(path string) (File, error) {
	var f File
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return File{Version: StoreVersion}, nil
	}
	if err != nil {
		return f, fmt.Errorf("auth: read token store: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return f, fmt.Errorf("auth: parse token store %s: %w", path, err)
	}
	if f.Version != StoreVersion {
		return f, fmt.Errorf("auth: token store %s has version %d, want %d", path, f.Version, StoreVersion)
	}
	return f, nil
}

// Verify returns the principal a token names. Every refusal is
// ErrInvalidToken, except a store that cannot be read, which is reported as
// itself (and the token is refused too).
func (s *Store) Verify(value string) (Principal, error) {
	id, ok := tokenID(value)
	if !ok {
		return Principal{}, ErrInvalidToken
	}
	snap := s.current()
	if snap.err != nil {
		return Principal{}, snap.err
	}
	e, ok := snap.byID[id]
	h := hashToken(value)
	if !ok {
		return Principal{}, ErrInvalidToken
	}
	if subtle.ConstantTimeCompare(h[:], e.hash[:]) != 1 {
		return Principal{}, ErrInvalidToken
	}
	return e.p, nil
}

// Policy returns the governance policy of the token of public id, nil when
// it has none or is not in the store. The policy is shared: do not modify it.
func (s *Store) Policy(id string) *Policy {
	snap := s.current()
	if snap.err != nil {
		return nil
	}
	return snap.byID[id].policy
}

// Issued reports whether the token of public id is in the store, false
// once it is revoked. A store that cannot be read answers true: as for
// Watch, that is the operator's fault, and ends nothing.
func (s *Store) Issued(id string) bool {
	snap := s.current()
	if snap.err != nil {
		return true
	}
	_, ok := snap.byID[id]
	return ok
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.@_-]{0,63}$`)

// ValidName reports whether name may name a principal.
func ValidName(name string) bool { return nameRE.MatchString(name) }

// Issue creates a token for a principal and returns its value, which is not
// kept anywhere: show it once.
func (s *Store) Issue(name string, role Role) (value string, e Entry, err error) {
	return s.IssueWithPolicy(name, role, nil)
}

// IssueWithPolicy is Issue with the token's governance policy (nil: none).
func (s *Store) IssueWithPolicy(name string, role Role, policy *Policy) (value string, e Entry, err error) {
	if !ValidName(name) || !role.valid() {
		return "", Entry{}, fmt.Errorf("auth: bad principal %q with role %q", name, role)
	}
	if field, err := policy.Validate(); err != nil {
		return "", Entry{}, fmt.Errorf("auth: policy %s: %w", field, err)
	}
	if !policy.Limited() {
		policy = nil
	}
	err = s.update(func(f *File) error {
		value, e = s.newEntry(name, role)
		e.Policy = policy
		f.Tokens = append(f.Tokens, e)
		return nil
	})
	return value, e, err
}

// IssueService replaces every token of service name with a new one.
func (s *Store) IssueService(name string) (value string, err error) {
	if !ValidName(name) {
		return "", fmt.Errorf("auth: bad service name %q", name)
	}
	err = s.update(func(f *File) error {
		f.Tokens = slices.DeleteFunc(f.Tokens, func(e Entry) bool { return e.Role == RoleService && e.Name == name })
		var e Entry
		value, e = s.newEntry(name, RoleService)
		f.Tokens = append(f.Tokens, e)
		return nil
	})
	return value, err
}

func (s *Store) newEntry(name string, role Role) (string, Entry) {
	value, id := newToken()
	h := hashToken(value)
	return value, Entry{ID: id, Name: name, Role: role, SHA256: hex.EncodeToString(h[:]), Created: s.now().UTC().Truncate(time.Second)}
}

// Revoke removes the token with the public id; ErrNotFound if none has it.
func (s *Store) Revoke(id string) error {
	return s.update(func(f *File) error {
		n := len(f.Tokens)
		f.Tokens = slices.DeleteFunc(f.Tokens, func(e Entry) bool { return e.ID == id })
		if len(f.Tokens) == n {
			return ErrNotFound
		}
		return nil
	})
}

// List returns every token's entry, oldest first.
func (s *Store) List() ([]Entry, error) {
	f, err := readFile(s.path)
	return f.Tokens, err
}

// update applies change to the file under the lock and writes it by atomic
// rename.
func (s *Store) update(change func(*File) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(s.path), 0o700); err != nil {
		return fmt.Errorf("auth: create token store directory: %w", err)
	}
	lock, err := os.OpenFile(s.path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("auth: lock token store: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("auth: lock token store: %w", err)
	}
	f, err := readFile(s.path)
	if err != nil {
		return err
	}
	f.Version = StoreVersion
	if err := change(&f); err != nil {
		return err
	}
	if f.Tokens == nil {
		f.Tokens = []Entry{}
	}
	b, _ := json.MarshalIndent(f, "", "  ")
	if err := writeAtomic(s.path, append(b, '\n')); err != nil {
		return fmt.Errorf("auth: write token store: %w", err)
	}
	s.publish(s.load())
	return nil
}

// WriteTokenFile writes a token value to path (mode 0600, its directory
// 0700), for the one process that should present it.
func WriteTokenFile(path, value string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("auth: write token file: %w", err)
	}
	if err := writeAtomic(path, []byte(value+"\n")); err != nil {
		return fmt.Errorf("auth: write token file: %w", err)
	}
	return nil
}

// writeAtomic replaces path with data, mode 0600: a fresh temporary file
// of its own in the same directory (never one a name could have planted or
// left world-readable), synced, then renamed over path.
func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err = tmp.Write(data); err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// ReadTokenFile reads a token written by WriteTokenFile (or by hand: the
// first line, trimmed).
func ReadTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read token file: %w", err)
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	tok := string(bytes.TrimSpace(line))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	return tok, nil
}

// EnsureAdminToken creates an admin token in file when file does not exist
// (first start) and reports whether it did. An existing file is left alone,
// even when its token was revoked: revocation is the operator's decision.
func (s *Store) EnsureAdminToken(file string) (created bool, err error) {
	if _, err := os.Stat(file); err == nil {
		return false, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("auth: %w", err)
	}
	value, _, err := s.Issue("admin", RoleAdmin)
	if err != nil {
		return false, err
	}
	return true, WriteTokenFile(file, value)
}

// EnsureServiceToken makes file hold a valid token of service name, issuing
// a new one (replacing the service's old tokens) when it does not.
func (s *Store) EnsureServiceToken(file, name string) error {
	if tok, err := ReadTokenFile(file); err == nil {
		if p, err := s.Verify(tok); err == nil && p.IsService(name) {
			return nil
		}
	}
	value, err := s.IssueService(name)
	if err != nil {
		return err
	}
	return WriteTokenFile(file, value)
}
