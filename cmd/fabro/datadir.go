package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// dataDirLockName is the file in a data directory that the one fabro serve
// using it holds an flock on, with its pid inside. The kernel drops the
// lock when the process ends, however it ends, so a stale file never
// blocks a new server.
const dataDirLockName = "serve.lock"

// lockDataDir takes dir for this process, or explains who has it: two
// servers on one vault, token store and NATS store would otherwise fail
// later and confusingly (a NATS store that will not open, a port in use).
// The returned func releases it.
func lockDataDir(dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, dataDirLockName)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data directory %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data directory %s: lock %s: %w", dir, path, err)
		}
		return nil, dataDirBusy(dir, path)
	}
	// Ours: record the pid for the next one to name.
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() { f.Close() }, nil
}

// dataDirBusy says which process holds dir, when its lock file says, and
// how to run beside it.
func dataDirBusy(dir, path string) error {
	holder := "another fabro serve"
	if b, err := os.ReadFile(path); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
			holder = fmt.Sprintf("another fabro serve (pid %d)", pid)
		}
	}
	return fmt.Errorf("%s is using the data directory %s: stop it, talk to it with --server, or give this one its own directory with --data-dir DIR ($FABRO_DATA_DIR)", holder, dir)
}
