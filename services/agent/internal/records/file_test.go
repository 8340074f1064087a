package records_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/fabro-sh/fabro-go/services/agent/internal/records"
	"github.com/fabro-sh/fabro-go/services/agent/internal/records/recordstest"
)

func TestFile(t *testing.T) {
	f, err := records.NewFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	recordstest.Run(t, f)
}

func TestFileCorruptAndReopen(t *testing.T) {
	dir := t.TempDir()
	f, _ := records.NewFile(dir)
	if _, err := f.Put(t.Context(), recordstest.Record("s_a"), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "s_bad.pb"), []byte("not a record"), 0o600); err != nil {
		t.Fatal(err)
	}
	g, _ := records.NewFile(dir) // another process: revisions start again at 1
	if _, rev, err := g.Get(t.Context(), "s_a"); err != nil || rev != 1 {
		t.Fatalf("reopened Get: rev %d, %v", rev, err)
	}
	if _, _, err := g.Get(t.Context(), "s_bad"); !errors.Is(err, records.ErrCorrupt) {
		t.Fatalf("corrupt record: %v, want ErrCorrupt", err)
	}
	if _, _, err := g.Get(t.Context(), "../x"); !errors.Is(err, records.ErrNotFound) {
		t.Fatalf("path-like id: %v, want ErrNotFound", err)
	}
}
