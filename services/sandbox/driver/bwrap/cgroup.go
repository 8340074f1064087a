package bwrap

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// processAllowance is added to a process limit for bwrap itself and the
// sandbox's init (a Go program with a few threads), which run in the
// command's group: the command gets at least the limit asked for.
const processAllowance = 16

// cgroups are the cgroup v1 controllers in which this process may make
// child groups: one group per command holds bwrap and everything in the
// sandbox. cgroup v2 is not used yet (its no-internal-process rule would
// need the plugin to move itself into a leaf first).
type cgroups struct {
	memory, pids, cpu string // our group's directory per controller; "" when not writable
	memsw             bool   // memory.memsw.* exists: swap is accounted too
}

// probeCgroups finds the controllers this process can make groups in.
func probeCgroups() cgroups {
	var c cgroups
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return c
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for ctrl := range strings.SplitSeq(parts[1], ",") {
			dir := filepath.Join("/sys/fs/cgroup", ctrl, parts[2])
			if !writable(dir) {
				continue
			}
			switch ctrl {
			case "memory":
				c.memory = dir
				_, err := os.Stat(filepath.Join(dir, "memory.memsw.limit_in_bytes"))
				c.memsw = err == nil
			case "pids":
				c.pids = dir
			case "cpu":
				if _, err := os.Stat(filepath.Join(dir, "cpu.cfs_quota_us")); err == nil {
					c.cpu = dir
				}
			}
		}
	}
	return c
}

// writable says whether a child group can be made (and removed) in dir.
func writable(dir string) bool {
	probe := filepath.Join(dir, fmt.Sprintf("fabro-bwrap-probe-%d", os.Getpid()))
	if err := os.Mkdir(probe, 0o755); err != nil {
		return false
	}
	return os.Remove(probe) == nil
}

func (c cgroups) support() driver.LimitSupport {
	return driver.LimitSupport{Memory: c.memory != "", Processes: c.pids != "", CPU: c.cpu != "", NetworkNone: true}
}

// group is one command's cgroups, one directory per controller used.
type group struct {
	mem, pids string
	dirs      []string
}

// newGroup makes the groups the limits need, with the limits set; nil
// when no limit is set or enforceable.
func (c cgroups) newGroup(name string, l driver.Limits) (*group, error) {
	g := &group{}
	mk := func(parent string, files map[string]string) (string, error) {
		dir := filepath.Join(parent, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return "", err
		}
		g.dirs = append(g.dirs, dir)
		for f, v := range files {
			if err := os.WriteFile(filepath.Join(dir, f), []byte(v), 0o644); err != nil {
				return "", fmt.Errorf("cgroup %s: %w", f, err)
			}
		}
		return dir, nil
	}
	var err error
	if l.MemoryBytes > 0 && c.memory != "" {
		v := strconv.FormatInt(l.MemoryBytes, 10)
		files := map[string]string{"memory.limit_in_bytes": v}
		if g.mem, err = mk(c.memory, files); err == nil && c.memsw {
			// After the plain limit: memsw may never be below it.
			err = os.WriteFile(filepath.Join(g.mem, "memory.memsw.limit_in_bytes"), []byte(v), 0o644)
		}
		if err != nil {
			g.remove()
			return nil, err
		}
	}
	if l.Processes > 0 && c.pids != "" {
		if g.pids, err = mk(c.pids, map[string]string{"pids.max": strconv.Itoa(l.Processes + processAllowance)}); err != nil {
			g.remove()
			return nil, err
		}
	}
	if l.CPU > 0 && c.cpu != "" {
		quota := max(int64(l.CPU*100000), 1000)
		if _, err = mk(c.cpu, map[string]string{"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": strconv.FormatInt(quota, 10)}); err != nil {
			g.remove()
			return nil, err
		}
	}
	if len(g.dirs) == 0 {
		return nil, nil
	}
	return g, nil
}

// procs are the cgroup.procs files the command's first process joins.
func (g *group) procs() []string {
	var out []string
	for _, d := range g.dirs {
		out = append(out, filepath.Join(d, "cgroup.procs"))
	}
	return out
}

// chown gives the cgroup.procs files to the sandbox's uid, which the
// command's first process runs as when it joins them (cgroup v1 lets a
// process move itself into a group whose procs file it may write). The
// command never sees the cgroup filesystem.
func (g *group) chown(id ident) error {
	if id.cred == nil {
		return nil
	}
	for _, p := range g.procs() {
		if err := os.Chown(p, int(id.cred.Uid), int(id.cred.Gid)); err != nil {
			return err
		}
	}
	return nil
}

// hit names the limit the command ran into, if any.
func (g *group) hit() driver.LimitHit {
	if g.mem != "" && counter(filepath.Join(g.mem, "memory.oom_control"), "oom_kill") > 0 {
		return driver.LimitMemory
	}
	if g.pids != "" && counter(filepath.Join(g.pids, "pids.events"), "max") > 0 {
		return driver.LimitProcesses
	}
	return driver.LimitNone
}

// counter reads "key N" from a cgroup file.
func counter(file, key string) int64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// remove removes the groups, once the last process in them is reaped.
func (g *group) remove() {
	for _, d := range g.dirs {
		for i := 0; i < 100; i++ {
			err := os.Remove(d)
			if err == nil || errors.Is(err, os.ErrNotExist) || !errors.Is(err, syscall.EBUSY) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
