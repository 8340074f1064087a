package local

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// Per-command cgroups. Where the host lets the service make cgroups, each
// command runs in one of its own, below the service's own cgroup:
//
//   - cgroup v1 (our machines): a directory in the freezer and pids
//     hierarchies (required: they are what kills the whole command), and
//     in memory and cpu where those are writable. bash is forked from a
//     thread of the service that was moved into the command's cgroups for
//     the fork (v1 places threads, and a child starts in its forking
//     thread's cgroups), so not one instruction of the command runs
//     outside them; the thread is moved back at once.
//   - cgroup v2: bash is cloned straight into the cgroup (CLONE_INTO_CGROUP
//     through SysProcAttr.UseCgroupFD), and the cgroup is killed with
//     cgroup.kill.
//
// When bash has exited, or the command is stopped with KILL, the whole
// cgroup is frozen (no process in it can fork), every process in it is
// killed, and the service waits for them to die and reaps the ones
// reparented to it. That holds whatever the command did: setsid, a double
// fork, a cleared environment. Only a process with root's power to move
// itself to another cgroup can leave, and the marker sweep (reap_linux.go)
// still looks for those.

// cgroupBase is the directory, below the service's own cgroup, that holds
// one directory per service instance (see instanceName), which holds its
// commands' cgroups. Services sharing a cgroup (two on one host, a test
// run beside a service) each touch their own instance directory only, and
// those of dead instances: never a live one's.
const cgroupBase = "fabro-sandbox"

// cgroupHost is what the host allows, found once.
type cgroupHost struct {
	v2     string            // the v2 instance directory, or ""
	v1     map[string]string // controller -> instance directory
	self   map[string]string // controller -> the service's own v1 cgroup directory
	limits driver.LimitSupport
	reason string // why there are no per-command cgroups; "" when there are
	// swept counts the processes of dead instances killed at discovery.
	swept int
}

func (h *cgroupHost) enabled() bool { return h.reason == "" }

var hostCgroups = sync.OnceValue(discoverCgroups)

// mountinfo lists the cgroup mounts: their mount point, the root of the
// hierarchy they show, and their type and super options.
type cgMount struct {
	point, root, fstype string
	opts                []string
}

func cgroupMounts() []cgMount {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []cgMount
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		a, b := strings.Fields(pre), strings.Fields(post)
		if len(a) < 5 || len(b) < 3 || (b[0] != "cgroup" && b[0] != "cgroup2") {
			continue
		}
		out = append(out, cgMount{point: a[4], root: a[3], fstype: b[0], opts: strings.Split(b[2], ",")})
	}
	return out
}

// ownCgroups reads /proc/self/cgroup: controller (or "" for v2) -> path.
func ownCgroups() map[string]string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for c := range strings.SplitSeq(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out
}

// probe makes dir (and its parents) and a child in it, to see whether the
// service may make cgroups there.
func probe(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	p := filepath.Join(dir, "probe-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return os.Remove(p)
}

// instanceName names this process's instance directory: its pid and start
// time, which together are never reused while the host runs, so a later
// service can tell a dead instance's directory from a live one's.
func instanceName(pid int) (string, bool) {
	st, ok := readStat(pid)
	if !ok {
		return "", false
	}
	return fmt.Sprintf("svc-%d-%d", pid, st.start), true
}

// deadInstance reports whether name is an instance directory whose process
// is gone. Other names (another program's, or an older layout's) are not
// this driver's to judge.
func deadInstance(name string) bool {
	var pid int
	var start uint64
	if n, err := fmt.Sscanf(name, "svc-%d-%d", &pid, &start); n != 2 || err != nil || pid <= 0 {
		return false
	}
	live, ok := instanceName(pid)
	return !ok || live != name
}

func discoverCgroups() *cgroupHost {
	h := &cgroupHost{v1: map[string]string{}, self: map[string]string{}}
	inst, ok := instanceName(os.Getpid())
	if !ok {
		h.reason = "no /proc/self/stat"
		return h
	}
	own := ownCgroups()
	mounts := cgroupMounts()
	if own == nil || mounts == nil {
		h.reason = "no cgroup filesystem is mounted"
		return h
	}
	dirOf := func(m cgMount, p string) string {
		if m.root != "/" {
			p = strings.TrimPrefix(p, m.root)
		}
		return filepath.Join(m.point, p)
	}
	var why []string
	for _, ctrl := range []string{"freezer", "pids", "memory", "cpu"} {
		p, ok := own[ctrl]
		if !ok {
			continue
		}
		for _, m := range mounts {
			if m.fstype != "cgroup" || !slices.Contains(m.opts, ctrl) {
				continue
			}
			self := dirOf(m, p)
			base := filepath.Join(self, cgroupBase, inst)
			if err := probe(base); err != nil {
				why = append(why, fmt.Sprintf("%s: %v", ctrl, err))
				break
			}
			h.self[ctrl], h.v1[ctrl] = self, base
			break
		}
	}
	if h.v1["freezer"] != "" && h.v1["pids"] != "" {
		h.limits = driver.LimitSupport{Processes: true, Memory: h.v1["memory"] != "", CPU: h.v1["cpu"] != ""}
		h.swept = h.sweepDead()
		return h
	}
	h.v1 = nil
	if p, ok := own[""]; ok {
		for _, m := range mounts {
			if m.fstype != "cgroup2" {
				continue
			}
			if err := h.discoverV2(dirOf(m, p), inst); err != nil {
				why = append(why, "cgroup v2: "+err.Error())
				continue
			}
			h.swept = h.sweepDead()
			return h
		}
	}
	if len(why) == 0 {
		why = append(why, "neither the v1 freezer and pids hierarchies nor a cgroup v2 with cgroup.kill")
	}
	h.reason = "no per-command cgroups: " + strings.Join(why, "; ")
	return h
}

// discoverV2 enables the controllers it can for the commands' cgroups below
// self's instance directory inst. It works where the service's cgroup may
// have children with controllers: the root, or a delegated cgroup the
// service has left.
func (h *cgroupHost) discoverV2(self, inst string) error {
	base := filepath.Join(self, cgroupBase, inst)
	if err := probe(base); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(base, "cgroup.kill")); err != nil {
		return fmt.Errorf("no cgroup.kill (Linux 5.14): %w", err)
	}
	avail, _ := os.ReadFile(filepath.Join(self, "cgroup.controllers"))
	for _, c := range []string{"memory", "pids", "cpu"} {
		if !slices.Contains(strings.Fields(string(avail)), c) {
			continue
		}
		// Every level must pass the controller down.
		if os.WriteFile(filepath.Join(self, "cgroup.subtree_control"), []byte("+"+c), 0) != nil ||
			os.WriteFile(filepath.Join(self, cgroupBase, "cgroup.subtree_control"), []byte("+"+c), 0) != nil ||
			os.WriteFile(filepath.Join(base, "cgroup.subtree_control"), []byte("+"+c), 0) != nil {
			continue
		}
		switch c {
		case "memory":
			h.limits.Memory = true
		case "pids":
			h.limits.Processes = true
		case "cpu":
			h.limits.CPU = true
		}
	}
	h.v2 = base
	return nil
}

// sweepDead kills what dead instances left in their instance directories
// beside this one's (the commands of a service killed with SIGKILL, and
// whatever they started), removes their cgroups and returns how many
// processes it killed. A live instance's directory is never touched.
func (h *cgroupHost) sweepDead() int {
	// The directories of one dead instance, by controller.
	dead := map[string]map[string]string{}
	for ctrl, base := range h.instanceDirs() {
		ents, _ := os.ReadDir(filepath.Dir(base))
		for _, e := range ents {
			if e.IsDir() && deadInstance(e.Name()) {
				if dead[e.Name()] == nil {
					dead[e.Name()] = map[string]string{}
				}
				dead[e.Name()][ctrl] = filepath.Join(filepath.Dir(base), e.Name())
			}
		}
	}
	killed := 0
	for _, dirs := range dead {
		// Each command's cgroup, as a cmdGroup of this host, so that it
		// is killed as a command's is: frozen, killed, waited for.
		cmds := map[string]*cmdGroup{}
		for ctrl, dir := range dirs {
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if !e.IsDir() {
					continue
				}
				g := cmds[e.Name()]
				if g == nil {
					g = &cmdGroup{host: h, dirs: map[string]string{}}
					cmds[e.Name()] = g
				}
				if ctrl == "" {
					g.v2 = filepath.Join(dir, e.Name())
				} else {
					g.dirs[ctrl] = filepath.Join(dir, e.Name())
				}
			}
		}
		for _, g := range cmds {
			if g.v2 != "" || g.dirs["freezer"] != "" {
				killed += len(g.procs())
				g.kill(0)
			}
			g.remove()
		}
		for _, dir := range dirs {
			unix.Rmdir(dir)
		}
	}
	return killed
}

// instanceDirs are this instance's directories, by controller ("" for v2).
func (h *cgroupHost) instanceDirs() map[string]string {
	if h.v2 != "" {
		return map[string]string{"": h.v2}
	}
	return h.v1
}

// cmdGroup is one command's cgroup.
type cmdGroup struct {
	host   *cgroupHost
	dirs   map[string]string // v1: controller -> the command's directory
	v2     string
	limits driver.Limits
}

// newCmdGroup makes the cgroup of one command; name is unique to it.
// Limits are written in start (on v1 once bash is inside). A nil
// *cmdGroup is no cgroup: its methods start and do nothing more.
func (h *cgroupHost) newCmdGroup(name string, l driver.Limits) (*cmdGroup, error) {
	g := &cmdGroup{host: h, limits: l}
	if h.v2 != "" {
		g.v2 = filepath.Join(h.v2, name)
		if err := mkdirIn(h.v2, name); err != nil {
			return nil, fmt.Errorf("make the command's cgroup: %w", err)
		}
		return g, nil
	}
	g.dirs = map[string]string{}
	for ctrl, base := range h.v1 {
		if (ctrl == "memory" && l.MemoryBytes == 0) || (ctrl == "cpu" && l.CPU == 0) {
			continue // not needed: fewer directories, a cheaper exec
		}
		d := filepath.Join(base, name)
		if err := mkdirIn(base, name); err != nil {
			g.remove()
			return nil, fmt.Errorf("make the command's cgroup: %w", err)
		}
		g.dirs[ctrl] = d
	}
	return g, nil
}

// mkdirIn makes the command cgroup name in the instance directory base,
// making base again if it is gone: a service of an older release removes
// every empty directory below fabro-sandbox when it starts, ours between
// two commands too.
func mkdirIn(base, name string) error {
	err := os.Mkdir(filepath.Join(base, name), 0o755)
	if errors.Is(err, os.ErrNotExist) {
		if err = os.MkdirAll(base, 0o755); err == nil {
			err = os.Mkdir(filepath.Join(base, name), 0o755)
		}
	}
	return err
}

func writeFile(p, v string) error { return os.WriteFile(p, []byte(v), 0) }

// start starts cmd inside the cgroup and then applies the limits. bash
// gets SIGKILL as its parent-death signal, from a forker thread (see
// forker_linux.go): if the service dies, so does every command's bash.
func (g *cmdGroup) start(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if g == nil {
		return onForker(func() (bool, error) { return true, startCmd(cmd) })
	}
	if g.v2 != "" {
		fd, err := unix.Open(g.v2, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open the command's cgroup: %w", err)
		}
		defer unix.Close(fd)
		if err := g.applyV2(); err != nil {
			return err
		}
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
		return onForker(func() (bool, error) { return true, startCmd(cmd) })
	}
	// Until bash is in, pids.max leaves room for the forking thread.
	if g.limits.Processes > 0 {
		if err := writeFile(filepath.Join(g.dirs["pids"], "pids.max"), strconv.Itoa(g.limits.Processes+1)); err != nil {
			return fmt.Errorf("set pids.max: %w", err)
		}
	}
	err := onForker(func() (bool, error) {
		tid := strconv.Itoa(unix.Gettid())
		var moved []string
		var err error
		for ctrl, d := range g.dirs {
			if err = writeFile(filepath.Join(d, "tasks"), tid); err != nil {
				err = fmt.Errorf("enter the %s cgroup: %w", ctrl, err)
				break
			}
			moved = append(moved, ctrl)
		}
		if err == nil {
			err = startCmd(cmd)
		}
		back := true
		for _, ctrl := range moved {
			if writeFile(filepath.Join(g.host.self[ctrl], "tasks"), tid) != nil {
				back = false
			}
		}
		return back, err
	})
	if err != nil {
		return err
	}
	// The memory limit only now: while the service's thread was inside,
	// an OOM kill in the cgroup could have chosen the service.
	if err := g.applyV1(); err != nil {
		g.kill(cmd.Process.Pid)
		return err
	}
	return nil
}

func (g *cmdGroup) applyV1() error {
	l := g.limits
	if l.Processes > 0 {
		if err := writeFile(filepath.Join(g.dirs["pids"], "pids.max"), strconv.Itoa(l.Processes)); err != nil {
			return fmt.Errorf("set pids.max: %w", err)
		}
	}
	if d := g.dirs["memory"]; d != "" && l.MemoryBytes > 0 {
		v := strconv.FormatInt(l.MemoryBytes, 10)
		if err := writeFile(filepath.Join(d, "memory.limit_in_bytes"), v); err != nil {
			return fmt.Errorf("set memory.limit_in_bytes: %w", err)
		}
		// Swap counts too where the host accounts it.
		if _, err := os.Stat(filepath.Join(d, "memory.memsw.limit_in_bytes")); err == nil {
			if err := writeFile(filepath.Join(d, "memory.memsw.limit_in_bytes"), v); err != nil {
				return fmt.Errorf("set memory.memsw.limit_in_bytes: %w", err)
			}
		}
	}
	if d := g.dirs["cpu"]; d != "" && l.CPU > 0 {
		const period = 100000
		quota := max(int(l.CPU*period), 1000)
		if err := writeFile(filepath.Join(d, "cpu.cfs_period_us"), strconv.Itoa(period)); err != nil {
			return fmt.Errorf("set cpu.cfs_period_us: %w", err)
		}
		if err := writeFile(filepath.Join(d, "cpu.cfs_quota_us"), strconv.Itoa(quota)); err != nil {
			return fmt.Errorf("set cpu.cfs_quota_us: %w", err)
		}
	}
	return nil
}

// applyV2 writes the limits before the clone: the service never enters a
// v2 cgroup.
func (g *cmdGroup) applyV2() error {
	l := g.limits
	set := func(file, v string) error {
		if err := writeFile(filepath.Join(g.v2, file), v); err != nil {
			return fmt.Errorf("set %s: %w", file, err)
		}
		return nil
	}
	if l.Processes > 0 {
		if err := set("pids.max", strconv.Itoa(l.Processes)); err != nil {
			return err
		}
	}
	if l.MemoryBytes > 0 {
		if err := set("memory.max", strconv.FormatInt(l.MemoryBytes, 10)); err != nil {
			return err
		}
		if _, err := os.Stat(filepath.Join(g.v2, "memory.swap.max")); err == nil {
			if err := set("memory.swap.max", "0"); err != nil {
				return err
			}
		}
	}
	if l.CPU > 0 {
		const period = 100000
		if err := set("cpu.max", fmt.Sprintf("%d %d", max(int(l.CPU*period), 1000), period)); err != nil {
			return err
		}
	}
	return nil
}

// members lists the processes in the cgroup, zombies included: the
// kernel lists a zombie in its cgroup until it is reaped.
func (g *cmdGroup) members() []int {
	dir := g.v2
	if dir == "" {
		dir = g.dirs["freezer"]
	}
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for f := range strings.FieldsSeq(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// procs lists the live (not zombie) processes in the cgroup.
func (g *cmdGroup) procs() []int {
	var out []int
	for _, pid := range g.members() {
		if st, ok := readStat(pid); ok && st.state != 'Z' {
			out = append(out, pid)
		}
	}
	return out
}

// kill kills every process in the cgroup and waits, up to sweepLimit, for
// them to die, then reaps those reparented to the service (the service is
// a subreaper). bash (the command's own process, reaped by os/exec) must
// be unreaped; 0 when there is none.
func (g *cmdGroup) kill(bash int) {
	if g == nil {
		return
	}
	deadline := time.Now().Add(sweepLimit)
	wait := 100 * time.Microsecond
	var held []*handle
	defer func() {
		for _, h := range held {
			h.close()
		}
	}()
	for {
		pids := g.procs()
		if len(pids) == 0 {
			break
		}
		// Frozen (v1), nothing in the cgroup can fork while it is
		// killed; v2's cgroup.kill does the same in the kernel. Each
		// process is pinned first, so the service can reap those
		// reparented to it without touching a recycled pid.
		freezer := g.dirs["freezer"]
		if g.v2 == "" {
			g.freeze(freezer, "FROZEN", deadline)
		}
		for _, pid := range g.procs() {
			if pid == bash {
				unix.Kill(bash, unix.SIGKILL)
				continue
			}
			if h, ok := pin(pid, func(st procStat) bool { return st.state != 'Z' }); ok {
				h.kill()
				held = append(held, h)
			}
		}
		if g.v2 != "" {
			writeFile(filepath.Join(g.v2, "cgroup.kill"), "1")
		} else {
			g.freeze(freezer, "THAWED", deadline)
		}
		for _, h := range held {
			h.reap()
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(wait)
		wait = min(2*wait, 20*time.Millisecond)
	}
	// A dying process leaves cgroup.procs before it is a zombie, and
	// before its children are reparented: every one is awaited, then
	// those reparented to the service are reaped.
	for _, h := range held {
		h.awaitExit(deadline)
	}
	for _, h := range held {
		h.reap()
	}
}

// freeze sets the freezer state and waits for it, up to deadline.
func (g *cmdGroup) freeze(dir, state string, deadline time.Time) {
	p := filepath.Join(dir, "freezer.state")
	if writeFile(p, state) != nil {
		return
	}
	for wait := 50 * time.Microsecond; ; wait = min(2*wait, 10*time.Millisecond) {
		b, err := os.ReadFile(p)
		if err != nil || strings.TrimSpace(string(b)) == state || time.Now().After(deadline) {
			return
		}
		time.Sleep(wait)
	}
}

// hit names the limit the command ran into, if any: an OOM kill, or a
// fork refused at pids.max.
func (g *cmdGroup) hit() driver.LimitHit {
	if g == nil {
		return driver.LimitNone
	}
	if g.v2 != "" {
		if eventCount(filepath.Join(g.v2, "memory.events"), "oom_kill") > 0 {
			return driver.LimitMemory
		}
		if eventCount(filepath.Join(g.v2, "pids.events"), "max") > 0 {
			return driver.LimitProcesses
		}
		return driver.LimitNone
	}
	if d := g.dirs["memory"]; d != "" && eventCount(filepath.Join(d, "memory.oom_control"), "oom_kill") > 0 {
		return driver.LimitMemory
	}
	if eventCount(filepath.Join(g.dirs["pids"], "pids.events"), "max") > 0 {
		return driver.LimitProcesses
	}
	return driver.LimitNone
}

// eventCount reads "key N" from a flat-keyed cgroup file.
func eventCount(p, key string) int64 {
	b, err := os.ReadFile(p)
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

// staleGroups are command cgroups that could not be removed yet (a process
// in uninterruptible sleep); every later remove tries them again.
var staleGroups struct {
	sync.Mutex
	dirs []string
}

// remove deletes the cgroup once it is empty; bash must be reaped. The
// retries run without the lock: it guards the list only, so commands
// ending together never wait on each other's rmdir.
func (g *cmdGroup) remove() {
	if g == nil {
		return
	}
	var dirs []string
	if g.v2 != "" {
		dirs = append(dirs, g.v2)
	}
	for _, d := range g.dirs {
		dirs = append(dirs, d)
	}
	staleGroups.Lock()
	dirs = append(dirs, staleGroups.dirs...)
	staleGroups.dirs = nil
	staleGroups.Unlock()
	var stale []string
	for _, d := range dirs {
		var err error
		for range 50 {
			if err = unix.Rmdir(d); err == nil || !errors.Is(err, unix.EBUSY) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		if errors.Is(err, unix.EBUSY) {
			stale = append(stale, d)
		}
	}
	if len(stale) > 0 {
		staleGroups.Lock()
		staleGroups.dirs = append(staleGroups.dirs, stale...)
		staleGroups.Unlock()
	}
}
