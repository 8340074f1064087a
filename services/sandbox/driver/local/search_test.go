package local_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/drivertest"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/local"
)

var backends = []struct {
	name string
	b    driver.GrepBackend
}{{"ripgrep", driver.BackendRipgrep}, {"posix", driver.BackendPOSIX}}

// A link swapped between an inside and an outside target while grep runs
// must never let grep read outside the root: grep searches what it checked
// (the file or directory it opened), not the name again. The search
// programs are wrappers that hold the search until the test has swapped the
// link, so every round hits the window between the check and the search.
func TestGrepSymlinkRace(t *testing.T) {
	bin, gate := t.TempDir(), t.TempDir()
	for _, prog := range []string{"rg", "grep"} {
		real, err := exec.LookPath(prog)
		if err != nil {
			t.Skipf("%s is not installed", prog)
		}
		script := fmt.Sprintf("#!/bin/sh\n: >%[1]s/started.%[2]s\nwhile [ ! -e %[1]s/go ]; do sleep 0.001; done\nexec %[3]s \"$@\"\n", gate, prog, real)
		if err := os.WriteFile(filepath.Join(bin, prog), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// As root, with every privilege to read outside: what is tested here
	// is that the search gets the directory opened inside the root, not
	// the name (that it also runs as the commands' user is tested by the
	// service's isolation test).
	d := local.New(local.Config{WorkspaceRoot: t.TempDir(), Environ: []string{"PATH=" + bin + ":/usr/local/bin:/usr/bin:/bin"}, User: "root"})
	sb := drivertest.NewSandbox(t, d, driver.Spec{})
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
	point := func(target string) {
		tmp := filepath.Join(root, ".link.tmp")
		os.Remove(tmp)
		if err := os.Symlink(target, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, link); err != nil {
			t.Fatal(err)
		}
	}
	const rounds = 10
	for _, be := range backends {
		for _, p := range []string{"link", "link/secret.txt"} {
			prog := map[driver.GrepBackend]string{driver.BackendRipgrep: "rg", driver.BackendPOSIX: "grep"}[be.b]
			inside := 0
			for range rounds {
				os.Remove(filepath.Join(gate, "go"))
				os.Remove(filepath.Join(gate, "started."+prog))
				point("in")
				done := make(chan driver.GrepResult, 1)
				go func() {
					res, err := sb.Grep(t.Context(), driver.GrepOptions{Pattern: "needle", Path: p, MaxResults: 10, Backend: be.b})
					if err != nil {
						t.Errorf("%s %s: %v", be.name, p, err)
					}
					done <- res
				}()
				// The check is done once the program runs: swap, then let
				// it search.
				for {
					if _, err := os.Stat(filepath.Join(gate, "started."+prog)); err == nil {
						break
					}
					select {
					case res := <-done:
						t.Fatalf("%s %s: grep ended before its program started: %+v", be.name, p, res)
					case <-time.After(time.Millisecond):
					}
				}
				point(outside)
				os.WriteFile(filepath.Join(gate, "go"), nil, 0o644)
				for _, m := range (<-done).Matches {
					if strings.Contains(m.Text, "OUTSIDE") {
						t.Errorf("%s, path %s: read outside the root: %+v", be.name, p, m)
					} else {
						inside++
					}
				}
			}
			if inside != rounds {
				t.Errorf("%s, path %s: %d of %d rounds found the inside line", be.name, p, inside, rounds)
			}
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
