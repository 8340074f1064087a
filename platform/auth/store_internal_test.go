package auth

import (
	"os"
	"path/filepath"
	"testing"
)

// TestTokenFileIgnoresPlantedTemp: a leftover world-readable or linked
// "<file>.tmp" beside a token file is neither written through nor left to
// decide the new file's mode.
func TestTokenFileIgnoresPlantedTemp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "admin.token")
	elsewhere := filepath.Join(t.TempDir(), "stolen")
	if err := os.Symlink(elsewhere, path+".tmp"); err != nil {
		t.Fatal(err)
	}
	if err := WriteTokenFile(path, "fabro_secret"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(elsewhere); err == nil {
		t.Error("the token was written through a planted link")
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("token file %v, %v; want mode 0600", fi, err)
	}
}
