package local

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// TestWriteFileSyncs checks the order that makes WriteFile's replace
// durable: the temporary file is synced while the target still holds the
// old content, then renamed, then its directory is synced; and a failed
// sync leaves the old content and no temporary file.
func TestWriteFileSyncs(t *testing.T) {
	d := New(Config{WorkspaceRoot: t.TempDir()})
	sbi, err := d.Create(t.Context(), driver.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sbi.Delete(t.Context()) })
	sb := sbi.(*sandbox)
	target := filepath.Join(sb.dir, "sub", "f.txt")
	if _, err := sb.WriteFile(t.Context(), "sub/f.txt", []byte("old")); err != nil {
		t.Fatal(err)
	}

	var synced []string
	var failWith error
	orig := syncFile
	t.Cleanup(func() { syncFile = orig })
	syncFile = func(f *os.File) error {
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		content, _ := os.ReadFile(target)
		kind := "file"
		if fi.IsDir() {
			kind = "dir"
		}
		synced = append(synced, kind+" while target="+string(content))
		if failWith != nil {
			return failWith
		}
		return orig(f)
	}

	if _, err := sb.WriteFile(t.Context(), "sub/f.txt", []byte("new")); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"file while target=old", "dir while target=new"}, synced); diff != "" {
		t.Errorf("syncs (-want +got):\n%s", diff)
	}

	synced, failWith = nil, errors.New("disk on fire")
	if _, err := sb.WriteFile(t.Context(), "sub/f.txt", []byte("newer")); err == nil || !errors.Is(err, failWith) {
		t.Errorf("WriteFile with a failing sync = %v; want the sync error", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "new" {
		t.Errorf("after a failed sync the file holds %q; want the old %q", b, "new")
	}
	if ents, _ := os.ReadDir(filepath.Dir(target)); len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}
}
