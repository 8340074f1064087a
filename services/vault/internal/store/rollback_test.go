package store

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabro-sh/fabro-go/services/vault/internal/envelope"
)

// rollbackFixture is a store with a counter: OLD_KEY at v1 and GONE
// written, the file copied (the "backup"), then GONE deleted and OLD_KEY
// replaced.
type rollbackFixture struct {
	dir, path, counter string
	kek                *envelope.KEK
	backup             []byte
	backupGen, newGen  uint64
}

func newRollbackFixture(t *testing.T) *rollbackFixture {
	t.Helper()
	dir := t.TempDir()
	f := &rollbackFixture{dir: dir, path: filepath.Join(dir, "secrets.db"), counter: filepath.Join(dir, "elsewhere", "generation")}
	f.kek = newKEK(t)
	s, err := Open(f.path, f.kek, nil, Options{CounterFile: f.counter})
	if err != nil {
		t.Fatal(err)
	}
	for _, put := range [][2]string{{"OLD_KEY", "v1"}, {"GONE", "deleted later"}} {
		if _, err := s.Put(put[0], []byte(put[1]), nil, "t"); err != nil {
			t.Fatal(err)
		}
	}
	if f.backup, err = os.ReadFile(f.path); err != nil {
		t.Fatal(err)
	}
	f.backupGen = s.Generation()
	if _, err := s.Delete("GONE", nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put("OLD_KEY", []byte("v2"), nil, "t"); err != nil {
		t.Fatal(err)
	}
	f.newGen = s.Generation()
	if got := readCounterT(t, f.counter); got != f.newGen {
		t.Fatalf("counter %d after the writes, want the store's generation %d", got, f.newGen)
	}
	return f
}

func (f *rollbackFixture) open(accept bool) (*Store, error) {
	return Open(f.path, f.kek, nil, Options{CounterFile: f.counter, AcceptRollback: accept})
}

func readCounterT(t *testing.T, file string) uint64 {
	t.Helper()
	c, err := readCounter(file)
	if err != nil || !c.present {
		t.Fatalf("counter %s: %v (present %v)", file, err, c.present)
	}
	return c.value
}

// TestRollbackRefused: an older copy of the store put back is refused at
// open, naming both generations and the way out; nothing of it is served.
func TestRollbackRefused(t *testing.T) {
	f := newRollbackFixture(t)
	if err := os.WriteFile(f.path, f.backup, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := f.open(false)
	var rb *RollbackError
	if !errors.As(err, &rb) {
		t.Fatalf("open of an older copy: %v (%v), want a *RollbackError", err, s)
	}
	if rb.Generation != f.backupGen || rb.Counter != f.newGen || rb.Missing || rb.Unknown {
		t.Errorf("rollback %+v, want store %d, counter %d", rb, f.backupGen, f.newGen)
	}
	for _, want := range []string{fmt.Sprintf("generation %d", f.backupGen), fmt.Sprintf("generation %d", f.newGen), f.counter, "-vault-accept-rollback"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	// The refusal changed nothing: the counter is where it was.
	if got := readCounterT(t, f.counter); got != f.newGen {
		t.Errorf("counter %d after a refusal, want %d", got, f.newGen)
	}
}

// TestRollbackAccepted: with AcceptRollback the older copy opens (its
// deleted secret is back, knowingly), Rollback says what was accepted, the
// store is written at once above the old counter, and the next open needs
// no flag.
func TestRollbackAccepted(t *testing.T) {
	f := newRollbackFixture(t)
	if err := os.WriteFile(f.path, f.backup, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := f.open(true)
	if err != nil {
		t.Fatal(err)
	}
	if rb := s.Rollback(); rb == nil || rb.Generation != f.backupGen || rb.Counter != f.newGen {
		t.Errorf("Rollback() = %+v, want store %d counter %d", rb, f.backupGen, f.newGen)
	}
	if got := s.Generation(); got <= f.newGen {
		t.Errorf("generation %d after acceptance, want above the counter %d", got, f.newGen)
	}
	if v, _ := mustValue(t, s, "GONE"); v != "deleted later" {
		t.Errorf("GONE = %q in the accepted copy", v)
	}
	again, err := f.open(false)
	if err != nil {
		t.Fatalf("open after an accepted rollback: %v", err)
	}
	if again.Rollback() != nil {
		t.Error("the next open reports a rollback again")
	}
}

// TestRollbackEvasions: the ways around the counter are refused too: an
// old copy with its header damaged (no generation to compare), the counter
// file deleted, the store deleted; a store ahead of its counter (a crash
// between the two writes) opens and heals the counter; a counter that is
// not a number fails the open.
func TestRollbackEvasions(t *testing.T) {
	t.Run("old copy with a damaged header", func(t *testing.T) {
		f := newRollbackFixture(t)
		first, rest, _ := strings.Cut(string(f.backup), "\n")
		if err := os.WriteFile(f.path, []byte(first[:len(first)-4]+"AAA=\n"+rest), 0o600); err != nil {
			t.Fatal(err)
		}
		var rb *RollbackError
		if _, err := f.open(false); !errors.As(err, &rb) || !rb.Unknown {
			t.Errorf("open: %v, want a rollback of unknown generation", err)
		}
	})
	t.Run("counter deleted", func(t *testing.T) {
		f := newRollbackFixture(t)
		if err := os.WriteFile(f.path, f.backup, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(f.counter); err != nil {
			t.Fatal(err)
		}
		var rb *RollbackError
		if _, err := f.open(false); !errors.As(err, &rb) || !rb.Missing {
			t.Errorf("open: %v, want a missing counter refused", err)
		}
	})
	t.Run("store deleted", func(t *testing.T) {
		f := newRollbackFixture(t)
		if err := os.Remove(f.path); err != nil {
			t.Fatal(err)
		}
		var rb *RollbackError
		if _, err := f.open(false); !errors.As(err, &rb) || rb.Generation != 0 || rb.Counter != f.newGen {
			t.Errorf("open: %v, want generation 0 against %d refused", err, f.newGen)
		}
	})
	t.Run("crash between the store and the counter", func(t *testing.T) {
		f := newRollbackFixture(t)
		if err := writeCounter(f.counter, f.newGen-1); err != nil {
			t.Fatal(err)
		}
		s, err := f.open(false)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		if s.Rollback() != nil {
			t.Error("reported as a rollback")
		}
		if got := readCounterT(t, f.counter); got != f.newGen {
			t.Errorf("counter %d, want it healed to %d", got, f.newGen)
		}
	})
	t.Run("counter not a number", func(t *testing.T) {
		f := newRollbackFixture(t)
		if err := os.WriteFile(f.counter, []byte("seven\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := f.open(true); err == nil || !strings.Contains(err.Error(), "generation number") {
			t.Errorf("open: %v, want the counter refused", err)
		}
	})
}

// withoutGeneration reseals the header of the store at path with no
// generation in its index, as vaults wrote before the counter.
func withoutGeneration(t *testing.T, path string, kek *envelope.KEK) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	first, rest, _ := strings.Cut(string(data), "\n")
	_, check, _, ok := parseHeader(first)
	if !ok {
		t.Fatal("no header")
	}
	plain, err := kek.Open(check, checkAADv2)
	if err != nil {
		t.Fatal(err)
	}
	text, idxJSON, _ := strings.Cut(string(plain), "\n")
	var idx index
	if err := json.Unmarshal([]byte(idxJSON), &idx); err != nil {
		t.Fatal(err)
	}
	idx.Generation = 0
	b, _ := json.Marshal(idx)
	sealed, err := kek.Seal(append([]byte(text+"\n"), b...), checkAADv2)
	if err != nil {
		t.Fatal(err)
	}
	header := fmt.Sprintf("%skek=%s dek=%s check=%s\n", headerPrefix, kek.ID(),
		base64.StdEncoding.EncodeToString(sealed.WrappedDEK), base64.StdEncoding.EncodeToString(sealed.Ciphertext))
	if err := os.WriteFile(path, []byte(header+rest), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRollbackCounterStarts: a store from before the counter (no
// generation, no counter file) opens and gets both at once, so a copy of
// it put back later is caught.
func TestRollbackCounterStarts(t *testing.T) {
	dir := t.TempDir()
	path, counter := filepath.Join(dir, "secrets.db"), filepath.Join(dir, "generation")
	kek := newKEK(t)
	s, err := Open(path, kek, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put("KEY", []byte("v1"), nil, "t"); err != nil {
		t.Fatal(err)
	}
	withoutGeneration(t, path, kek)
	old, _ := os.ReadFile(path)
	if _, err := Open(path, kek, nil, Options{CounterFile: counter}); err != nil {
		t.Fatalf("open of a store without a counter: %v", err)
	}
	if got := readCounterT(t, counter); got == 0 {
		t.Error("no counter written")
	}
	if err := os.WriteFile(path, old, 0o600); err != nil {
		t.Fatal(err)
	}
	var rb *RollbackError
	if _, err := Open(path, kek, nil, Options{CounterFile: counter}); !errors.As(err, &rb) {
		t.Errorf("the pre-counter copy put back: %v, want refused", err)
	}
}
