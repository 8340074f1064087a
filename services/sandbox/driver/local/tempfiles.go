package local

import (
	"crypto/rand"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// An atomic write's temporary file is named
// .fabro-tmp-<pid>.<incarnation>.<random>-<name>, next to the file it
// replaces (a rename must stay on one filesystem). A process killed
// between the create and the rename leaves it behind; the next Create on
// the workspace (a restarted service reopening its sandbox) removes those
// of writers that are no longer alive, so a crash leaves no trace in the
// workspace.
const tempPrefix = ".fabro-tmp-"

// incarnation tells this process's temporary files from those of a
// previous process that had the same pid.
var incarnation = strconv.Itoa(os.Getpid()) + "." + rand.Text()[:8]

// tempName is the temporary file of an atomic write of base.
func tempName(base string) string {
	return tempPrefix + incarnation + "." + rand.Text()[:10] + "-" + base
}

// maxSweep bounds the entries a sweep visits, so that a huge workspace
// costs a Create a bounded time; leftovers beyond it stay.
const maxSweep = 200_000

// sweepTemps removes the temporary files of dead writers under root and
// returns how many it removed.
func sweepTemps(root *os.Root) int {
	removed, visited := 0, 0
	_ = fs.WalkDir(root.FS(), ".", func(p string, e fs.DirEntry, err error) error {
		if visited++; visited > maxSweep {
			return fs.SkipAll
		}
		if err != nil || e.IsDir() || !stale(e.Name()) {
			return nil
		}
		if e.Type().IsRegular() && root.Remove(filepath.FromSlash(p)) == nil {
			removed++
		}
		return nil
	})
	return removed
}

// stale reports whether name is a temporary file of a writer that is no
// longer alive: another incarnation whose pid is gone. A live pid (another
// service on the same workspace, or a reused pid) keeps its files.
func stale(name string) bool {
	rest, ok := strings.CutPrefix(name, tempPrefix)
	if !ok {
		return false
	}
	pid, inc, ok := strings.Cut(rest, ".")
	if !ok {
		return false
	}
	inc, _, ok = strings.Cut(inc, ".")
	if !ok || pid+"."+inc == incarnation {
		return false
	}
	n, err := strconv.Atoi(pid)
	if err != nil || n <= 0 {
		return false
	}
	return errors.Is(syscall.Kill(n, 0), syscall.ESRCH)
}
