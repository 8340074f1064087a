package sandbox

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// harden keeps the service's secrets from the commands it runs: the
// process becomes non-dumpable, so its /proc files (environ, mem, fd) are
// closed to every other process but one with CAP_SYS_PTRACE, and the data
// directory is kept 0700.
func harden(dataDir string) error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("sandbox: make the service non-dumpable: %w", err)
	}
	if dataDir == "" {
		return nil
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	fi, err := os.Stat(dataDir)
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return os.Chmod(dataDir, fi.Mode().Perm()&0o700)
	}
	return nil
}
