package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Rollback detection. Every write of the store carries a generation, one
// more than the last, in the header's sealed index, which the KEK
// authenticates: it cannot be edited without the key. The newest generation
// written is also kept outside the store, in the counter file. A store whose
// generation is below the counter is an older copy put back (a backup
// restored, a file replaced), whose deleted secrets and old values would
// return: Open refuses it, naming both, unless the operator accepts it.
//
// The counter protects as far as it is out of reach of whoever can replace
// the store: beside the store it catches a restored store file; on another
// volume (with the KEK, say) a restored data directory too.

// RollbackError is an Open refused because the store is older than its
// rollback counter.
type RollbackError struct {
	Store       string
	Generation  uint64 // the store's; 0 when it has none (see Unknown)
	Unknown     bool   // the store's header cannot vouch for a generation
	CounterFile string
	Counter     uint64 // 0 with Missing
	Missing     bool   // the counter file is gone but the store has written generations
}

func (e *RollbackError) Error() string {
	const accept = "pass -vault-accept-rollback to accept it knowingly (secrets deleted since come back, values replaced since are old)"
	switch {
	case e.Missing:
		return fmt.Sprintf("the vault store %s is at generation %d, but its rollback counter %s is missing (deleted to pass an older store, or moved): restore the counter, or %s",
			e.Store, e.Generation, e.CounterFile, accept)
	case e.Unknown:
		return fmt.Sprintf("the vault store %s has no readable generation (its header is old or damaged), while its rollback counter %s is at generation %d: it may be an older copy; restore the newest store, or %s",
			e.Store, e.CounterFile, e.Counter, accept)
	}
	return fmt.Sprintf("the vault store %s is at generation %d, older than its rollback counter %s at generation %d: it is an older copy of the store (restored or replaced); restore the newest store, or %s",
		e.Store, e.Generation, e.CounterFile, e.Counter, accept)
}

// Rollback is the rollback Open accepted (Options.AcceptRollback); nil
// when the store was not older than its counter.
func (s *Store) Rollback() *RollbackError { return s.rollback }

// Generation is the generation of the store as last written.
func (s *Store) Generation() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.generation
}

// GetGeneration is the index's generation; 0 for none.
func (x *index) GetGeneration() uint64 {
	if x == nil {
		return 0
	}
	return x.Generation
}

// counterState is what the counter file says.
type counterState struct {
	value   uint64
	present bool
}

// readCounter reads the counter file; a missing one is not an error.
func readCounter(file string) (counterState, error) {
	if file == "" {
		return counterState{}, nil
	}
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return counterState{}, nil
	}
	if err != nil {
		return counterState{}, fmt.Errorf("read the rollback counter: %w", err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return counterState{}, fmt.Errorf("the rollback counter %s does not hold a generation number: %w", file, err)
	}
	return counterState{value: n, present: true}, nil
}

// writeCounter replaces the counter file's generation.
func writeCounter(file string, generation uint64) error {
	if file == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return fmt.Errorf("write the rollback counter: %w", err)
	}
	if err := writeFileAtomic(file, []byte(strconv.FormatUint(generation, 10)+"\n")); err != nil {
		return fmt.Errorf("write the rollback counter %s: %w", file, err)
	}
	return nil
}

// checkGeneration compares the store's generation (known: its header
// vouches for one) with the counter. A store ahead of the counter is a
// write whose counter update a crash cut off: it opens. When accept lets
// an older store open, the next write goes above both.
func (s *Store) checkGeneration(generation uint64, known bool, counter counterState, accept bool) error {
	s.generation = generation
	if s.counter == "" {
		return nil
	}
	var e *RollbackError
	switch {
	case !counter.present && generation > 0:
		e = &RollbackError{Generation: generation, Missing: true}
	case counter.present && counter.value > 0 && !known:
		e = &RollbackError{Unknown: true, Counter: counter.value}
	case counter.present && generation < counter.value:
		e = &RollbackError{Generation: generation, Counter: counter.value}
	default:
		return nil
	}
	e.Store, e.CounterFile = s.path, s.counter
	if !accept {
		return e
	}
	s.rollback = e
	s.generation = max(generation, counter.value)
	return nil
}
