package bwrap

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// The pause facet: every command of a sandbox (the cgroup-join shell,
// bwrap, the init and all it starts) joins one cgroup v1 freezer group of
// the sandbox's, which Pause freezes and Resume thaws. Stated only where
// the plugin may make freezer groups.

var _ driver.Pauser = (*sandbox)(nil)

// freezerRoot is this process's own freezer group, "" when it cannot make
// groups in it; probed once.
var freezerRoot = sync.OnceValue(func() string {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for ctrl := range strings.SplitSeq(parts[1], ",") {
			if dir := filepath.Join("/sys/fs/cgroup", ctrl, parts[2]); ctrl == "freezer" && writable(dir) {
				return dir
			}
		}
	}
	return ""
})

// freezer is a sandbox's freezer group, made by the first command.
type freezer struct {
	mu     sync.Mutex
	dir    string
	paused bool
}

// procs is the group's cgroup.procs for a command to join, the group made
// (and given to the sandbox's uid) on first use; "" without a freezer.
func (s *sandbox) freezerProcs() (string, error) {
	root := freezerRoot()
	if root == "" {
		return "", nil
	}
	z := &s.frz
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.dir == "" {
		b := make([]byte, 8)
		rand.Read(b)
		dir := filepath.Join(root, "fabro-bwrap-sbx-"+hex.EncodeToString(b))
		if err := os.Mkdir(dir, 0o755); err != nil {
			return "", fmt.Errorf("freezer group: %w", err)
		}
		if s.id.cred != nil {
			if err := os.Chown(filepath.Join(dir, "cgroup.procs"), int(s.id.cred.Uid), int(s.id.cred.Gid)); err != nil {
				os.Remove(dir)
				return "", fmt.Errorf("freezer group: %w", err)
			}
		}
		z.dir = dir
	}
	return filepath.Join(z.dir, "cgroup.procs"), nil
}

// Pause implements driver.Pauser: the freezer group goes FROZEN, and Pause
// returns once every task in it is.
func (s *sandbox) Pause(ctx context.Context) error {
	if freezerRoot() == "" {
		return fmt.Errorf("%w: the bwrap plugin has no writable cgroup v1 freezer here", driver.ErrUnsupported)
	}
	if _, err := s.freezerProcs(); err != nil {
		return err
	}
	z := &s.frz
	z.mu.Lock()
	defer z.mu.Unlock()
	z.paused = true
	state := filepath.Join(z.dir, "freezer.state")
	for {
		// Written again while FREEZING: a task that was in the kernel is
		// frozen by a later write.
		if err := os.WriteFile(state, []byte("FROZEN"), 0o644); err != nil {
			return fmt.Errorf("freeze: %w", err)
		}
		b, err := os.ReadFile(state)
		if err != nil {
			return fmt.Errorf("freeze: %w", err)
		}
		if strings.TrimSpace(string(b)) == "FROZEN" {
			return nil
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Resume implements driver.Pauser.
func (s *sandbox) Resume(context.Context) error {
	if freezerRoot() == "" {
		return fmt.Errorf("%w: the bwrap plugin has no writable cgroup v1 freezer here", driver.ErrUnsupported)
	}
	return s.frz.thaw()
}

func (z *freezer) thaw() error {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.dir == "" || !z.paused {
		return nil
	}
	if err := os.WriteFile(filepath.Join(z.dir, "freezer.state"), []byte("THAWED"), 0o644); err != nil {
		return fmt.Errorf("thaw: %w", err)
	}
	z.paused = false
	return nil
}

// remove removes the group, at Delete, once its tasks are gone.
func (z *freezer) remove() {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.dir == "" {
		return
	}
	for range 100 {
		err := os.Remove(z.dir)
		if err == nil || errors.Is(err, os.ErrNotExist) || !errors.Is(err, syscall.EBUSY) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	z.dir = ""
}
