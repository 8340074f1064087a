package local

import (
	"bytes"
	"errors"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A descendant that leaves the command's process group (setsid, setpgid)
// escapes the group kill. To find and kill such escapees without root or a
// cgroup:
//
//   - the service is a child subreaper (set once, at the first Create), so
//     an orphaned descendant is reparented to the service, not to init, and
//     stays findable under /proc/<service>/task/*/children;
//   - each command's environment carries a marker, execMarkerVar=<random
//     id>, which its descendants inherit across fork, exec and setsid;
//   - when a command is stopped, its process tree is recorded first, so a
//     child that cleared its environment (env -i) is still known;
//   - when the command's bash has exited, and while it is still unreaped
//     (so its pid, and the group id, cannot be reused), [tree.sweep] kills
//     every process of the command: the service's children that are in the
//     command's group, carry its marker or were recorded, and all their
//     descendants; it repeats until none is left, and reaps those that were
//     reparented to the service.
//
// Nothing else is touched: the command's own bash is left to os/exec's
// Wait, and a child of the service that is not the command's (another
// command's bash or escapees, a search's rg, whatever else the service
// runs) matches neither the group, nor the marker, nor the record.
// Processes are pinned with pidfds, then checked, so a recycled pid is never
// signalled or reaped.

// execMarkerVar is the environment variable that marks a command's
// processes.
const execMarkerVar = "FABRO_SANDBOX_EXEC"

// sweepLimit bounds how long a sweep waits for killed processes to die
// (one in uninterruptible sleep can take long); what is left is retried by
// later sweeps.
const sweepLimit = 5 * time.Second

var subreaper = sync.OnceValue(func() bool {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == nil
})

// enableSubreaper makes the service a child subreaper, once.
func enableSubreaper() { subreaper() }

// havePidfd reports whether pidfd_open works (Linux 5.3, allowed by the
// seccomp profile); without it, processes are identified by pid and start
// time.
var havePidfd = sync.OnceValue(func() bool {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
})

// procStat is what the sweep needs of /proc/<pid>/stat.
type procStat struct {
	state      byte
	ppid, pgid int
	start      uint64 // clock ticks after boot
}

func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, false
	}
	st := procStat{state: f[0][0]}
	var e1, e2, e3 error
	st.ppid, e1 = strconv.Atoi(f[1])
	st.pgid, e2 = strconv.Atoi(f[2])
	st.start, e3 = strconv.ParseUint(f[19], 10, 64)
	return st, e1 == nil && e2 == nil && e3 == nil
}

// children lists pid's children, from every one of its threads.
func children(pid int) []int {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile(dir + t.Name() + "/children")
		if err != nil {
			continue
		}
		for f := range strings.FieldsSeq(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// reparented lists the service's orphans: the kernel gives an orphan to
// the first live thread of its subreaper, the main thread, which Go never
// ends; so only its list is read, not every thread's (the children
// the other threads forked are commands' bash and searches, never a
// command's escapee; the main thread may fork them too, so they are told
// apart as before).
func reparented() []int {
	self := strconv.Itoa(os.Getpid())
	b, err := os.ReadFile("/proc/" + self + "/task/" + self + "/children")
	if err != nil {
		return nil
	}
	var out []int
	for f := range strings.FieldsSeq(string(b)) {
		if c, err := strconv.Atoi(f); err == nil {
			out = append(out, c)
		}
	}
	return out
}

// reapGroup reaps the service's orphans in bash's process group once they
// have exited: processes of a command its cgroup holds that died on their
// own, or were dying when the cgroup was killed (a dying process leaves
// cgroup.procs before it is a zombie). bash must be unreaped, so that its
// group id is not another's.
func reapGroup(bash int) {
	self := os.Getpid()
	deadline := time.Now().Add(sweepLimit)
	for _, c := range reparented() {
		if c == bash {
			continue // os/exec's to reap (listed here when forked from the main thread)
		}
		if h, ok := pin(c, func(st procStat) bool { return st.ppid == self && st.pgid == bash }); ok {
			h.kill()
			h.awaitExit(deadline)
			h.reap()
			h.close()
		}
	}
}

// handle is one process of a command, pinned by a pidfd when there are
// pidfds.
type handle struct {
	pid   int
	fd    int // -1 without pidfds
	start uint64
}

// pin returns a handle on pid if ok says its stat belongs to the command.
// With a pidfd the check is made after the pidfd is opened, and the
// process must still be unreaped after it, so the check was of the pinned
// process and not of a successor with a recycled pid.
func pin(pid int, ok func(procStat) bool) (*handle, bool) {
	st, found := readStat(pid)
	if !found || !ok(st) {
		return nil, false
	}
	if !havePidfd() {
		return &handle{pid: pid, fd: -1, start: st.start}, true
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, false
	}
	h := &handle{pid: pid, fd: fd, start: st.start}
	if st2, found := readStat(pid); !found || st2.start != st.start || !ok(st2) || !h.unreaped() {
		h.close()
		return nil, false
	}
	return h, true
}

// unreaped reports whether the process still exists, if only as a zombie.
func (h *handle) unreaped() bool {
	if h.fd >= 0 {
		return !errors.Is(unix.PidfdSendSignal(h.fd, 0, nil, 0), unix.ESRCH)
	}
	st, ok := readStat(h.pid)
	return ok && st.start == h.start
}

func (h *handle) kill() {
	if h.fd >= 0 {
		unix.PidfdSendSignal(h.fd, unix.SIGKILL, nil, 0)
		return
	}
	if st, ok := readStat(h.pid); ok && st.start == h.start {
		unix.Kill(h.pid, unix.SIGKILL)
	}
}

// reap collects the process if it is a zombie child of the service; it
// never blocks.
func (h *handle) reap() {
	if h.fd >= 0 {
		var info unix.Siginfo
		unix.Waitid(unix.P_PIDFD, h.fd, &info, unix.WEXITED|unix.WNOHANG, nil)
		return
	}
	if st, ok := readStat(h.pid); ok && st.start == h.start && st.state == 'Z' && st.ppid == os.Getpid() {
		var ws unix.WaitStatus
		unix.Wait4(h.pid, &ws, unix.WNOHANG, nil)
	}
}

// awaitExit waits, up to deadline, until the process has exited: its pidfd
// turns readable only once the kernel has given its children to the
// subreaper, so a reap after it finds them.
func (h *handle) awaitExit(deadline time.Time) {
	for wait := 100 * time.Microsecond; ; wait = min(2*wait, 10*time.Millisecond) {
		left := time.Until(deadline)
		if left <= 0 {
			return
		}
		if h.fd >= 0 {
			fds := []unix.PollFd{{Fd: int32(h.fd), Events: unix.POLLIN}}
			if n, err := unix.Poll(fds, int(left.Milliseconds())+1); n != 0 || !errors.Is(err, unix.EINTR) {
				return
			}
			continue
		}
		if st, ok := readStat(h.pid); !ok || st.start != h.start || st.state == 'Z' {
			return
		}
		time.Sleep(wait)
	}
}

func (h *handle) close() {
	if h.fd >= 0 {
		unix.Close(h.fd)
		h.fd = -1
	}
}

// leftovers are processes a sweep killed but could not see die within
// sweepLimit; every later sweep tries them again.
var leftovers struct {
	sync.Mutex
	hs []*handle
}

// tree tracks one command's processes.
type tree struct {
	bash   int    // the command's bash: also its process group id
	marker []byte // "\x00" + execMarkerVar=id + "\x00"
	held   map[int]*handle
}

func newTree(bash int, markerKV string) *tree {
	return &tree{bash: bash, marker: []byte("\x00" + markerKV + "\x00"), held: map[int]*handle{}}
}

// markedSure also says whether the answer is sure: an environment that
// reads empty is not, as a process in the middle of execve shows none for
// a moment (its new stack is not set up yet), and a process that cleared
// its environment (env -i) shows none for good.
func (t *tree) markedSure(pid int) (marked, sure bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false, errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH)
	}
	if len(b) == 0 {
		return false, false
	}
	return bytes.Contains(append(append([]byte{0}, b...), 0), t.marker), true
}

// unsureRetries bounds how often a sweep looks again at children whose
// environment read empty (about 25 ms in all): long enough for an execve
// to finish, short enough for a child that cleared its environment.
const unsureRetries = 8

// expand adds the descendants of every held process (and of the processes
// in from) to held.
func (t *tree) expand(from ...int) {
	queue := append(from, slices.Collect(maps.Keys(t.held))...)
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		kids := children(p)
		if h := t.held[p]; h != nil && !h.unreaped() {
			continue // p's pid may already be another's: its list is not p's
		}
		for _, k := range kids {
			if k == t.bash || t.held[k] != nil {
				continue
			}
			h, ok := pin(k, func(st procStat) bool { return st.ppid == p })
			if !ok {
				continue
			}
			if ph := t.held[p]; ph != nil && !ph.unreaped() {
				h.close() // p is gone, so k's parent may have been another p
				continue
			}
			t.held[k] = h
			queue = append(queue, k)
		}
	}
}

// snapshot records the command's current process tree, before it is
// signalled: a child that cleared its environment and left the group is
// then still known when it is reparented to the service. bash must be
// unreaped. A nil tree (a command its cgroup holds) does nothing.
func (t *tree) snapshot() {
	if t != nil {
		t.expand(t.bash)
	}
}

// sweep kills every remaining process of the command and reaps those that
// were reparented to the service. bash must have exited and be unreaped.
func (t *tree) sweep() {
	if t == nil {
		return
	}
	self := os.Getpid()
	deadline := time.Now().Add(sweepLimit)
	wait := 100 * time.Microsecond
	retryLeftovers()
	for unsure := 0; ; {
		again := false
		for _, c := range reparented() {
			if c == t.bash || t.held[c] != nil {
				continue
			}
			if h, ok := pin(c, func(st procStat) bool {
				if st.ppid != self {
					return false
				}
				if st.pgid == t.bash {
					return true
				}
				if st.state == 'Z' {
					return false // no environment to read, and no execve under way
				}
				m, sure := t.markedSure(c)
				again = again || !sure
				return m
			}); ok {
				t.held[c] = h
			}
		}
		if again && len(t.held) == 0 && unsure < unsureRetries {
			// A child mid-execve may be ours: look again shortly.
			unsure++
			time.Sleep(time.Duration(unsure) * 500 * time.Microsecond)
			continue
		}
		t.expand()
		for _, h := range t.held {
			h.kill()
		}
		for pid, h := range t.held {
			h.reap()
			if !h.unreaped() {
				h.close()
				delete(t.held, pid)
			}
		}
		if len(t.held) == 0 {
			return
		}
		if time.Now().After(deadline) {
			leftovers.Lock()
			for _, h := range t.held {
				leftovers.hs = append(leftovers.hs, h)
			}
			leftovers.Unlock()
			clear(t.held)
			return
		}
		time.Sleep(wait)
		wait = min(2*wait, 20*time.Millisecond)
	}
}

// close releases the pidfds of a tree that was not swept.
func (t *tree) close() {
	if t == nil {
		return
	}
	for _, h := range t.held {
		h.close()
	}
	clear(t.held)
}

func retryLeftovers() {
	leftovers.Lock()
	defer leftovers.Unlock()
	kept := leftovers.hs[:0]
	for _, h := range leftovers.hs {
		h.kill()
		h.reap()
		if h.unreaped() {
			kept = append(kept, h)
		} else {
			h.close()
		}
	}
	clear(leftovers.hs[len(kept):])
	leftovers.hs = kept
}
