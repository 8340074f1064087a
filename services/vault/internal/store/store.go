// Package store keeps the vault's secrets in one file, every version sealed
// by the envelope package. The file is line oriented, one secret a line, so a
// record damaged on disk costs that secret alone: the other lines still load,
// and the damaged line is kept verbatim on every rewrite.
//
// The header line seals, under the key-encryption key, an index of the
// records: every name with the digest of its line, and the names already
// known to be damaged. At open, a line whose digest differs (a flipped byte,
// an edit), a line the index does not list, and a name the index lists but
// the file lacks (a file cut short) are each reported as a damaged secret,
// while the other secrets are served. Lines have no length limit, and values
// a size cap, so no write the store accepts can make it unreadable.
package store

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fabro-sh/fabro-go/services/vault/internal/envelope"
)

// Errors that callers branch on; the store wraps them with the secret's name.
var (
	ErrNotFound    = errors.New("secret not found")
	ErrInvalidName = errors.New("invalid secret name")
	ErrEmptyValue  = errors.New("empty secret value")
	ErrTooLarge    = errors.New("secret value too large")
)

// DefaultMaxValueBytes is the default cap on a secret value: room for an API
// key, a certificate chain or a cloud service-account file, and small enough
// that ten versions of many secrets stay a small file.
const DefaultMaxValueBytes = 64 << 10

// ConflictError is a failed check-and-set.
type ConflictError struct {
	Name     string
	Expected int64
	Current  int64 // 0 when the secret does not exist
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("secret %s: expected version %d, current version is %d", e.Name, e.Expected, e.Current)
}

// CorruptError says a record cannot be read or does not authenticate.
type CorruptError struct {
	Name   string
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("secret %s: record is corrupt: %s", e.Name, e.Reason)
}

// WrongKEKError is returned by [Open] when the store was sealed under a key
// other than the ones configured.
type WrongKEKError struct {
	StoreKEKID      string
	ConfiguredKEKID string
}

func (e *WrongKEKError) Error() string {
	return fmt.Sprintf("the key-encryption key (id %s) does not match the key that sealed the store (id %s): "+
		"configure the key in use, or pass it as the previous key to rotate to the new one", e.ConfiguredKEKID, e.StoreKEKID)
}

var nameRE = regexp.MustCompile(`^[A-Z][A-Z0-9_]{0,127}$`)

// ValidName reports whether name is a valid secret name: an upper-case letter,
// then upper-case letters, digits and underscores, 128 characters at most.
func ValidName(name string) bool { return nameRE.MatchString(name) }

// Metadata describes a secret without its value.
type Metadata struct {
	Name     string
	Current  int64
	Versions []VersionInfo // newest first
	Created  time.Time
	Updated  time.Time
}

// VersionInfo describes one version without its value.
type VersionInfo struct {
	Version   int64
	Created   time.Time
	CreatedBy string
	Size      int64
}

// Options tune a store; zero values take defaults.
type Options struct {
	MaxVersions   int              // versions kept per secret, default 10
	MaxValueBytes int              // largest value Put accepts, default DefaultMaxValueBytes
	Now           func() time.Time // clock, default time.Now
	// CounterFile keeps the rollback counter (rollback.go): the generation
	// of the newest store written. Empty: no rollback detection.
	CounterFile string
	// AcceptRollback opens a store older than its counter anyway; the
	// next write continues above the counter ([Store.Rollback] says what
	// was accepted).
	AcceptRollback bool
}

// Damage is one damaged record found at open, or kept from an earlier one.
type Damage struct {
	Name   string // "" for lines without a readable name
	Reason string
}

// Store is the secrets file and its decoded contents. It is safe for
// concurrent use; every write rewrites the file atomically.
type Store struct {
	path        string
	maxVersions int
	maxValue    int
	now         func() time.Time
	header      string         // what was wrong with the header at open, if anything
	counter     string         // the rollback counter's file; "" for none
	rollback    *RollbackError // what AcceptRollback accepted at open

	mu         sync.RWMutex
	generation uint64 // of the file as last written or read
	kek        *envelope.KEK
	secrets    map[string]*record
	corrupt    map[string]damaged // name -> the damaged record, kept verbatim
	strays     []string           // lines without a readable name, kept verbatim
}

// damaged is a record that cannot be served: its line as read ("" when the
// line is missing) and why.
type damaged struct {
	line   string
	reason string
}

type record struct {
	Name string `json:"name"`
	// Latest is the highest version ever written, so numbers are never reused
	// after the newest version is destroyed.
	Latest    int64     `json:"latest"`
	CreatedNS int64     `json:"created_unix_nano"`
	Versions  []version `json:"versions"` // newest first
}

type version struct {
	Version    int64  `json:"version"`
	CreatedNS  int64  `json:"created_unix_nano"`
	CreatedBy  string `json:"created_by"`
	Size       int64  `json:"size"`
	KEKID      string `json:"kek_id"`
	WrappedDEK []byte `json:"wrapped_dek"`
	Ciphertext []byte `json:"ciphertext"`
}

// aad binds every stored field of a version to its ciphertext, so editing
// the name, number, time, author or size makes the record fail to open.
func (v *version) aad(name string) []byte {
	return fmt.Appendf(nil, "fabro-vault/v1\x00%s\x00%d\x00%d\x00%s\x00%d", name, v.Version, v.CreatedNS, v.CreatedBy, v.Size)
}

func (v *version) sealed() envelope.Sealed {
	return envelope.Sealed{WrappedDEK: v.WrappedDEK, Ciphertext: v.Ciphertext, KEKID: v.KEKID}
}

const (
	headerPrefixV1 = "#fabro-vault v1 "
	headerPrefix   = "#fabro-vault v2 "
	checkText      = "fabro-vault kek check"
)

var (
	checkAAD   = []byte("fabro-vault/v1 kek check")
	checkAADv2 = []byte("fabro-vault/v2 header")
)

// index is the header's sealed list of records: the count, each healthy
// record's line digest and each damaged record's reason.
type index struct {
	Count   int               `json:"count"`
	Records map[string]string `json:"records"` // name -> digest of its line
	Damaged map[string]string `json:"damaged,omitempty"`
	Strays  int               `json:"strays,omitempty"`
	// Generation counts the writes of the store; the rollback counter
	// holds the newest one written.
	Generation uint64 `json:"generation,omitempty"`
}

func digest(line string) string {
	h := sha256.Sum256([]byte(line))
	return base64.RawStdEncoding.EncodeToString(h[:])
}

// Open loads the store at path, creating it when absent. When previous is not
// nil and the store is sealed under it, every data key is re-wrapped under
// kek before Open returns. A store sealed under neither key is refused with a
// [*WrongKEKError]. Damaged records do not fail Open: [Store.Damage] and
// [Store.List] name them.
func Open(path string, kek, previous *envelope.KEK, opts Options) (*Store, error) {
	s := &Store{
		path:        path,
		maxVersions: cmp.Or(opts.MaxVersions, 10),
		maxValue:    cmp.Or(opts.MaxValueBytes, DefaultMaxValueBytes),
		now:         opts.Now,
		kek:         kek,
		counter:     opts.CounterFile,
		secrets:     map[string]*record{},
		corrupt:     map[string]damaged{},
	}
	if s.now == nil {
		s.now = time.Now
	}
	counter, err := readCounter(s.counter)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := s.checkGeneration(0, true, counter, opts.AcceptRollback); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("create store directory: %w", err)
		}
		return s, s.persist()
	case err != nil:
		return nil, fmt.Errorf("read store: %w", err)
	}
	sealedUnder, idx, err := s.load(data, kek, previous)
	if err != nil {
		return nil, err
	}
	if err := s.checkGeneration(idx.GetGeneration(), idx != nil, counter, opts.AcceptRollback); err != nil {
		return nil, err
	}
	switch {
	case s.rollback != nil, s.counter != "" && !counter.present:
		// Written at once, above the counter: an accepted rollback holds
		// at the next start, and the counter never goes down; a store
		// without a counter yet (older vaults) gets its first.
		if err := s.persist(); err != nil {
			return nil, err
		}
	case counter.present && s.generation > counter.value:
		// A crash came between a write and its counter update.
		if err := writeCounter(s.counter, s.generation); err != nil {
			return nil, err
		}
	}
	if previous != nil && sealedUnder == previous.ID() {
		s.kek = previous
		if err := s.Rotate(kek); err != nil {
			return nil, fmt.Errorf("rotate to the new key-encryption key: %w", err)
		}
	}
	return s, nil
}

// load decodes the file and returns the id of the key that sealed it and
// its sealed index. With a readable header (v2), every line is checked
// against the sealed index; with a v1 header or a damaged one (no index),
// every version is checked by opening it.
func (s *Store) load(data []byte, kek, previous *envelope.KEK) (string, *index, error) {
	lines := strings.Split(string(data), "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1] // the file's final newline
	}
	if len(lines) == 0 {
		lines = []string{""}
	}
	kekID, check, v2, ok := parseHeader(lines[0])
	var key *envelope.KEK
	switch {
	case !ok:
		s.header = "the header line is missing or damaged"
	case kekID == kek.ID():
		key = kek
	case previous != nil && kekID == previous.ID():
		key = previous
	default:
		return "", nil, &WrongKEKError{StoreKEKID: kekID, ConfiguredKEKID: kek.ID()}
	}
	var idx *index
	if key != nil {
		aad := checkAAD
		if v2 {
			aad = checkAADv2
		}
		got, err := key.Open(check, aad)
		text, rest, _ := strings.Cut(string(got), "\n")
		switch {
		case err != nil || text != checkText:
			s.header = "the header's seal does not open with key " + key.ID() + " (the header was altered)"
			key = nil
		case v2:
			idx = &index{}
			if err := json.Unmarshal([]byte(rest), idx); err != nil {
				return "", nil, fmt.Errorf("store %s: the sealed index does not decode: %w", s.path, err)
			}
		}
	}
	seen := map[string]bool{}
	for _, line := range lines[1:] {
		if line == "" {
			continue
		}
		name, body, ok := strings.Cut(line, "\t")
		if !ok || !ValidName(name) {
			s.strays = append(s.strays, line)
			continue
		}
		if seen[name] {
			s.corrupt[name] = damaged{line: s.corrupt[name].line, reason: "the store holds two records of this name"}
			continue
		}
		seen[name] = true
		if idx != nil {
			if reason, ok := idx.Damaged[name]; ok {
				s.corrupt[name] = damaged{line: line, reason: reason}
				continue
			}
			want, ok := idx.Records[name]
			switch {
			case !ok:
				s.corrupt[name] = damaged{line: line, reason: "the record is not in the store's sealed index (added from outside the vault)"}
				continue
			case want != digest(line):
				s.corrupt[name] = damaged{line: line, reason: "the record does not match its sealed digest (damaged or edited on disk)"}
				continue
			}
		}
		var r record
		if err := json.Unmarshal([]byte(body), &r); err != nil || r.Name != name || len(r.Versions) == 0 {
			s.corrupt[name] = damaged{line: line, reason: "the record does not decode"}
			continue
		}
		if idx == nil {
			if reason := verify(&r, kek, previous); reason != "" {
				s.corrupt[name] = damaged{line: line, reason: reason}
				continue
			}
		}
		s.secrets[name] = &r
	}
	if idx != nil {
		for name := range idx.Records {
			if !seen[name] {
				s.corrupt[name] = damaged{reason: "the record is missing (the store file was cut short or the line removed)"}
			}
		}
		for name, reason := range idx.Damaged {
			if !seen[name] {
				s.corrupt[name] = damaged{reason: reason}
			}
		}
		return kekID, idx, nil
	}
	if key == nil {
		// Without a trustworthy header the key is known only by what it
		// opens: a key that opens none of several records is the wrong one.
		if len(s.secrets) == 0 && len(s.corrupt) > 0 {
			return "", nil, fmt.Errorf("store %s: %s, and no record opens with key %s: is it the right key?", s.path, s.header, kek.ID())
		}
		return kek.ID(), nil, nil
	}
	return kekID, nil, nil
}

// verify opens every version of r with the key that sealed it, for stores
// whose header cannot vouch for their records.
func verify(r *record, kek, previous *envelope.KEK) string {
	for i := range r.Versions {
		v := &r.Versions[i]
		key := kek
		if previous != nil && v.KEKID == previous.ID() {
			key = previous
		}
		if _, err := key.Open(v.sealed(), v.aad(r.Name)); err != nil {
			return "version " + strconv.FormatInt(v.Version, 10) + " does not authenticate"
		}
	}
	return ""
}

// parseHeader reads "#fabro-vault v2 kek=ID dek=B64 check=B64" (or v1): the
// id of the KEK that seals the store and the sealed check text, which in v2
// carries the index.
func parseHeader(line string) (kekID string, check envelope.Sealed, v2, ok bool) {
	rest, v2 := strings.CutPrefix(line, headerPrefix)
	if !v2 {
		if rest, ok = strings.CutPrefix(line, headerPrefixV1); !ok {
			return "", check, false, false
		}
	}
	var errs []error
	for f := range strings.FieldsSeq(rest) {
		k, v, _ := strings.Cut(f, "=")
		var err error
		switch k {
		case "kek":
			kekID = v
		case "dek":
			check.WrappedDEK, err = base64.StdEncoding.DecodeString(v)
		case "check":
			check.Ciphertext, err = base64.StdEncoding.DecodeString(v)
		}
		errs = append(errs, err)
	}
	if errors.Join(errs...) != nil || kekID == "" {
		return "", check, false, false
	}
	check.KEKID = kekID
	return kekID, check, v2, true
}

// Damage lists the damaged records, sorted by name, and what was wrong with
// the header at open, if anything.
func (s *Store) Damage() (records []Damage, header string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, name := range slices.Sorted(maps.Keys(s.corrupt)) {
		records = append(records, Damage{Name: name, Reason: s.corrupt[name].reason})
	}
	if len(s.strays) > 0 {
		records = append(records, Damage{Reason: strconv.Itoa(len(s.strays)) + " lines without a readable name are kept as they are"})
	}
	return records, s.header
}

// persist writes the whole store to a temporary file and renames it over the
// old one, so a crash leaves either the old or the new file, never a mix.
func (s *Store) persist() error {
	idx := index{Records: make(map[string]string, len(s.secrets)), Damaged: map[string]string{}, Strays: len(s.strays)}
	lines := make(map[string]string, len(s.secrets)+len(s.corrupt))
	for name, r := range s.secrets {
		body, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("encode secret %s: %w", name, err)
		}
		lines[name] = name + "\t" + string(body)
		idx.Records[name] = digest(lines[name])
	}
	for name, d := range s.corrupt {
		if d.line != "" {
			lines[name] = d.line
		}
		idx.Damaged[name] = d.reason
	}
	idx.Count = len(idx.Records) + len(idx.Damaged)
	idx.Generation = s.generation + 1
	sealedIndex, err := json.Marshal(idx)
	if err != nil {
		return fmt.Errorf("encode store index: %w", err)
	}
	check, err := s.kek.Seal(append([]byte(checkText+"\n"), sealedIndex...), checkAADv2)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "%skek=%s dek=%s check=%s\n", headerPrefix, s.kek.ID(),
		base64.StdEncoding.EncodeToString(check.WrappedDEK), base64.StdEncoding.EncodeToString(check.Ciphertext))
	for _, name := range slices.Sorted(maps.Keys(lines)) {
		buf.WriteString(lines[name])
		buf.WriteByte('\n')
	}
	for _, line := range s.strays {
		buf.WriteString(line)
		buf.WriteByte('\n')
	}
	if err := writeFileAtomic(s.path, buf.Bytes()); err != nil {
		return err
	}
	// The store first, then the counter: a crash between the two leaves a
	// store newer than its counter, which opens; the other order would
	// leave one older, which would be refused.
	s.generation = idx.Generation
	return writeCounter(s.counter, s.generation)
}

func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write store: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("write store: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write store: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write store: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write store: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write store: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync() // best effort: makes the rename durable on filesystems that need it
		d.Close()
	}
	return nil
}

// Put seals value as the next version of name. With expected set, the write
// happens only when the current version equals *expected (0: no secret yet).
func (s *Store) Put(name string, value []byte, expected *int64, by string) (Metadata, error) {
	if !ValidName(name) {
		return Metadata{}, fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	if len(value) == 0 {
		return Metadata{}, fmt.Errorf("secret %s: %w", name, ErrEmptyValue)
	}
	if len(value) > s.maxValue {
		return Metadata{}, fmt.Errorf("secret %s: %w: %d bytes, the limit is %d (-vault-max-secret-bytes)", name, ErrTooLarge, len(value), s.maxValue)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.corrupt[name]; ok {
		return Metadata{}, &CorruptError{Name: name, Reason: "cannot be decoded; delete it before writing a new value"}
	}
	r := s.secrets[name]
	current := int64(0)
	if r != nil {
		current = r.Versions[0].Version
	}
	if expected != nil && *expected != current {
		return Metadata{}, &ConflictError{Name: name, Expected: *expected, Current: current}
	}
	now := s.now().UnixNano()
	next := &record{Name: name, Latest: 1, CreatedNS: now}
	if r != nil {
		next.Latest, next.CreatedNS, next.Versions = r.Latest+1, r.CreatedNS, r.Versions
	}
	v := version{Version: next.Latest, CreatedNS: now, CreatedBy: by, Size: int64(len(value))}
	sealed, err := s.kek.Seal(value, v.aad(name))
	if err != nil {
		return Metadata{}, fmt.Errorf("seal secret %s: %w", name, err)
	}
	v.KEKID, v.WrappedDEK, v.Ciphertext = sealed.KEKID, sealed.WrappedDEK, sealed.Ciphertext
	next.Versions = append([]version{v}, next.Versions...)
	if len(next.Versions) > s.maxVersions {
		next.Versions = next.Versions[:s.maxVersions]
	}
	s.secrets[name] = next
	if err := s.persist(); err != nil {
		if r == nil {
			delete(s.secrets, name)
		} else {
			s.secrets[name] = r
		}
		return Metadata{}, err
	}
	return next.metadata(), nil
}

// Get returns a secret's metadata.
func (s *Store) Get(name string) (Metadata, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	r, err := s.lookup(name)
	if err != nil {
		return Metadata{}, err
	}
	return r.metadata(), nil
}

func (s *Store) lookup(name string) (*record, error) {
	if d, ok := s.corrupt[name]; ok {
		return nil, &CorruptError{Name: name, Reason: d.reason}
	}
	r, ok := s.secrets[name]
	if !ok {
		return nil, fmt.Errorf("secret %s: %w", name, ErrNotFound)
	}
	return r, nil
}

// List returns the metadata of every readable secret whose name starts with
// prefix, sorted by name, and the names of the records that cannot be read.
func (s *Store) List(prefix string) (secrets []Metadata, corrupt []string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for name, r := range s.secrets {
		if strings.HasPrefix(name, prefix) {
			secrets = append(secrets, r.metadata())
		}
	}
	for name := range s.corrupt {
		if strings.HasPrefix(name, prefix) {
			corrupt = append(corrupt, name)
		}
	}
	slices.SortFunc(secrets, func(a, b Metadata) int { return strings.Compare(a.Name, b.Name) })
	slices.Sort(corrupt)
	return secrets, corrupt
}

// Delete destroys every version of name, or only version when it is not nil.
// With expected set it is a check-and-set on the current version. It returns
// how many versions were destroyed.
func (s *Store) Delete(name string, ver, expected *int64) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d, ok := s.corrupt[name]; ok {
		// A corrupt record can always be removed whole: that is how it is fixed.
		if ver != nil || expected != nil {
			return 0, &CorruptError{Name: name, Reason: "cannot be decoded; delete it without a version"}
		}
		delete(s.corrupt, name)
		if err := s.persist(); err != nil {
			s.corrupt[name] = d
			return 0, err
		}
		return 1, nil
	}
	r, ok := s.secrets[name]
	if !ok {
		return 0, fmt.Errorf("secret %s: %w", name, ErrNotFound)
	}
	if expected != nil && *expected != r.Versions[0].Version {
		return 0, &ConflictError{Name: name, Expected: *expected, Current: r.Versions[0].Version}
	}
	next := &record{Name: name, Latest: r.Latest, CreatedNS: r.CreatedNS}
	for _, v := range r.Versions {
		if ver != nil && v.Version != *ver {
			next.Versions = append(next.Versions, v)
		}
	}
	destroyed := len(r.Versions) - len(next.Versions)
	if destroyed == 0 {
		return 0, fmt.Errorf("secret %s version %d: %w", name, *ver, ErrNotFound)
	}
	if len(next.Versions) == 0 {
		delete(s.secrets, name)
	} else {
		s.secrets[name] = next
	}
	if err := s.persist(); err != nil {
		s.secrets[name] = r
		return 0, err
	}
	return destroyed, nil
}

// Value decrypts the current version of name.
func (s *Store) Value(name string) (value []byte, ver int64, err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	r, err := s.lookup(name)
	if err != nil {
		return nil, 0, err
	}
	v := &r.Versions[0]
	value, err = s.kek.Open(v.sealed(), v.aad(name))
	if err != nil {
		return nil, 0, &CorruptError{Name: name, Reason: "version " + strconv.FormatInt(v.Version, 10) + " does not authenticate"}
	}
	return value, v.Version, nil
}

// Rotate re-wraps every data key under next and makes next the store's KEK.
// Values are not re-encrypted: only their wrapped DEKs change. A version that
// does not open under the current KEK is left as it is, and stays unreadable.
func (s *Store) Rotate(next *envelope.KEK) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rotated := make(map[string]*record, len(s.secrets))
	for name, r := range s.secrets {
		nr := &record{Name: name, Latest: r.Latest, CreatedNS: r.CreatedNS, Versions: slices.Clone(r.Versions)}
		for i := range nr.Versions {
			v := &nr.Versions[i]
			sealed, err := envelope.Rewrap(s.kek, next, v.sealed(), v.aad(name))
			if err != nil {
				continue
			}
			v.KEKID, v.WrappedDEK = sealed.KEKID, sealed.WrappedDEK
		}
		rotated[name] = nr
	}
	old, oldSecrets := s.kek, s.secrets
	s.kek, s.secrets = next, rotated
	if err := s.persist(); err != nil {
		s.kek, s.secrets = old, oldSecrets
		return err
	}
	return nil
}

// KEKID names the key that currently seals the store.
func (s *Store) KEKID() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.kek.ID()
}

func (r *record) metadata() Metadata {
	m := Metadata{Name: r.Name, Current: r.Versions[0].Version}
	for _, v := range r.Versions {
		m.Versions = append(m.Versions, VersionInfo{
			Version: v.Version, Created: time.Unix(0, v.CreatedNS).UTC(), CreatedBy: v.CreatedBy, Size: v.Size,
		})
	}
	m.Updated = m.Versions[0].Created
	m.Created = time.Unix(0, r.CreatedNS).UTC()
	return m
}
