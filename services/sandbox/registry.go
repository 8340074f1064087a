package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// registry is the durable list of sandboxes, one JSON file in the data
// directory, rewritten whole (temporary file, fsync, rename) on every
// create and delete, so that a crash leaves either the old list or the new.
// The service holds an exclusive lock on the directory while it runs: two
// services on one registry would each forget the other's sandboxes.
type registry struct {
	path string
	lock *os.File
}

// record is one sandbox as the registry keeps it: what its driver needs to
// find it again after a restart.
type record struct {
	ID      string      `json:"id"`
	Driver  string      `json:"driver"`
	Spec    driver.Spec `json:"spec"`
	Info    driver.Info `json:"info"`
	Created time.Time   `json:"created"`
	// Owner is the principal that created it (auth.Owner); absent in a
	// registry written before sandboxes had owners: such a sandbox is
	// reached by admins only.
	Owner string `json:"owner,omitempty"`
}

// record is e as the registry keeps it.
func (e *entry) record() record {
	return record{ID: e.id, Driver: e.driver, Spec: e.spec, Info: e.info, Created: e.created, Owner: e.owner}
}

type registryFile struct {
	Version   int      `json:"version"`
	Sandboxes []record `json:"sandboxes"`
}

// errRegistryBusy: another live service holds the data directory.
var errRegistryBusy = errors.New("another sandbox service holds the data directory")

// openRegistry locks dir (creating it) and reads the records kept there.
func openRegistry(dir string) (*registry, []record, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("create %s: %w", dir, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "registry.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("open registry lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, nil, fmt.Errorf("%w: %s", errRegistryBusy, dir)
		}
		return nil, nil, fmt.Errorf("lock registry: %w", err)
	}
	r := &registry{path: filepath.Join(dir, "sandboxes.json"), lock: f}
	b, err := os.ReadFile(r.path)
	if errors.Is(err, os.ErrNotExist) {
		return r, nil, nil
	}
	if err != nil {
		r.close()
		return nil, nil, fmt.Errorf("read registry: %w", err)
	}
	var rf registryFile
	if err := json.Unmarshal(b, &rf); err != nil {
		r.close()
		return nil, nil, fmt.Errorf("registry %s is corrupt: %w", r.path, err)
	}
	return r, rf.Sandboxes, nil
}

// save replaces the registry's contents with recs.
func (r *registry) save(recs []record) error {
	if r == nil {
		return nil
	}
	b, err := json.MarshalIndent(registryFile{Version: 1, Sandboxes: recs}, "", "  ")
	if err != nil {
		return err
	}
	tmp := r.path + ".new"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("write registry: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, r.path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write registry: %w", err)
	}
	if d, err := os.Open(filepath.Dir(r.path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// close gives up the lock.
func (r *registry) close() error {
	if r == nil || r.lock == nil {
		return nil
	}
	err := r.lock.Close()
	r.lock = nil
	return err
}
