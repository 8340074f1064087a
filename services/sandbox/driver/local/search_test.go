package local_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/drivertest"
)

var backends = []struct {
	name string
	b    driver.GrepBackend
}{{"ripgrep", driver.BackendRipgrep}, {"posix", driver.BackendPOSIX}}

// A link swapped between an inside and an outside target while grep runs
// must never let grep read outside the root: grep searches what it
// checked (the file or directory it opened), not the name again.
func TestGrepSymlinkRace(t *testing.T) {
	sb := drivertest.NewSandbox(t, newDriver(t), driver.Spec{})
	root := sb.Info().RootDirectory
	outside := t.TempDir()
	for _, dir := range []string{filepath.Join(root, "in"), outside} {
		where := "INSIDE"
		if dir == outside {
			where = "OUTSIDE"
		}
		os.MkdirAll(dir, 0o755)
		if err := os.WriteFile(filepath.Join(dir, "secret.txt"), []byte("needle "+where+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(root, "link")
	targets := []string{"in", outside}
	if err := os.Symlink("in", link); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var swapper sync.WaitGroup
	swapper.Go(func() {
		tmp := filepath.Join(root, ".link.tmp")
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			os.Remove(tmp)
			if err := os.Symlink(targets[i%2], tmp); err == nil {
				os.Rename(tmp, link) // atomic swap
			}
		}
	})
	defer func() { close(stop); swapper.Wait() }()

	const rounds = 500
	for _, be := range backends {
		for _, p := range []string{"link", "link/secret.txt"} {
			inside, outsideLines, escapes := 0, 0, 0
			for range rounds {
				res, err := sb.Grep(t.Context(), driver.GrepOptions{Pattern: "needle", Path: p, MaxResults: 10, Backend: be.b})
				switch {
				case errors.Is(err, driver.ErrPathEscapes):
					escapes++
					continue
				case err != nil:
					t.Fatalf("%s %s: %v", be.name, p, err)
				}
				for _, m := range res.Matches {
					if strings.Contains(m.Text, "OUTSIDE") {
						outsideLines++
					} else {
						inside++
					}
				}
			}
			if outsideLines != 0 {
				t.Errorf("%s, path %s: %d lines read outside the root in %d rounds", be.name, p, outsideLines, rounds)
			}
			if inside == 0 {
				t.Errorf("%s, path %s: no round found the inside line (%d refused as escapes)", be.name, p, escapes)
			}
			t.Logf("%s, path %s: %d inside lines, %d refused, 0 outside", be.name, p, inside, escapes)
		}
	}
}

// A binary file named outright, a newline in a file name and a FIFO give a
// result or a clear error, never an unparseable line.
func TestGrepOddFiles(t *testing.T) {
	sb := drivertest.NewSandbox(t, newDriver(t), driver.Spec{})
	root := sb.Info().RootDirectory
	files := map[string]string{
		"bin.dat":        "needle\x00binary\nneedle\n",
		"dir/new\nline":  "a needle\n",
		"dir/plain.txt":  "needle too\n",
		"dir/bin2.dat":   "x\x00needle\n",
		"dir/tab\tname":  "needle tab\n",
		"dir/colon:1:x":  "needle colon\n",
		"dir/nul\\0name": "needle backslash\n",
	}
	for name, content := range files {
		os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755)
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			res, err := sb.Grep(t.Context(), driver.GrepOptions{Pattern: "needle", Path: "bin.dat", MaxResults: 10, Backend: be.b})
			if err != nil || len(res.Matches) != 0 {
				t.Errorf("binary file: %v, %+v; want no matches (binary files are skipped)", err, res.Matches)
			}
			res, err = sb.Grep(t.Context(), driver.GrepOptions{Pattern: "needle", Path: "dir", MaxResults: 10, Backend: be.b})
			if err != nil {
				t.Fatalf("dir: %v", err)
			}
			var got []string
			for _, m := range res.Matches {
				got = append(got, m.Path)
			}
			want := []string{"dir/colon:1:x", "dir/new\nline", "dir/nul\\0name", "dir/plain.txt", "dir/tab\tname"}
			if strings.Join(got, "|") != strings.Join(want, "|") {
				t.Errorf("dir: paths %q; want %q", got, want)
			}
			res, err = sb.Grep(t.Context(), driver.GrepOptions{Pattern: "needle", Path: "dir/new\nline", MaxResults: 10, Backend: be.b})
			if err != nil || len(res.Matches) != 1 || res.Matches[0].Path != "dir/new\nline" || res.Matches[0].Text != "a needle" {
				t.Errorf("file with a newline: %v, %+v", err, res.Matches)
			}
			_, err = sb.Grep(t.Context(), driver.GrepOptions{Pattern: "needle", Path: "fifo", MaxResults: 10, Backend: be.b})
			if !errors.Is(err, driver.ErrInvalid) {
				t.Errorf("fifo: %v; want ErrInvalid", err)
			}
		})
	}
}
