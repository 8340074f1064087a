package store

import (
	"context"
)

// Backend is where the vault keeps its sealed records: the single file
// ([FileBackend], for one replica and `fabro serve` on embedded defaults)
// or a JetStream key-value bucket ([KV], for replicas). Both store the
// same record, every version sealed by the envelope package under the KEK,
// which neither keeps; both refuse a stale check-and-set with a
// [*ConflictError] and report a damaged record as a [*CorruptError].
type Backend interface {
	// Put seals value as the next version of name; with expected set,
	// only when the current version is *expected (0: no secret yet).
	Put(ctx context.Context, name string, value []byte, expected *int64, by string) (Metadata, error)
	// Get returns a secret's metadata.
	Get(ctx context.Context, name string) (Metadata, error)
	// List returns the readable secrets whose names start with prefix,
	// sorted by name, and the names of the damaged records.
	List(ctx context.Context, prefix string) (secrets []Metadata, corrupt []string, err error)
	// Delete destroys every version of name, or only *ver; with expected
	// set, only when the current version is *expected.
	Delete(ctx context.Context, name string, ver, expected *int64) (int, error)
	// Value decrypts the current version of name.
	Value(ctx context.Context, name string) ([]byte, int64, error)
	// KEKID names the key that seals new versions.
	KEKID() string
}

// FileBackend is the [Backend] of a single-file [Store].
type FileBackend struct{ *Store }

var _ Backend = FileBackend{}

// Put implements Backend.
func (f FileBackend) Put(_ context.Context, name string, value []byte, expected *int64, by string) (Metadata, error) {
	return f.Store.Put(name, value, expected, by)
}

// Get implements Backend.
func (f FileBackend) Get(_ context.Context, name string) (Metadata, error) { return f.Store.Get(name) }

// List implements Backend.
func (f FileBackend) List(_ context.Context, prefix string) ([]Metadata, []string, error) {
	secrets, corrupt := f.Store.List(prefix)
	return secrets, corrupt, nil
}

// Delete implements Backend.
func (f FileBackend) Delete(_ context.Context, name string, ver, expected *int64) (int, error) {
	return f.Store.Delete(name, ver, expected)
}

// Value implements Backend.
func (f FileBackend) Value(_ context.Context, name string) ([]byte, int64, error) {
	return f.Store.Value(name)
}
