package local

import (
	"fmt"
	"os/exec"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// Commands are forked from forkers: goroutines locked to their OS threads
// for good. A child's parent-death signal (SysProcAttr.Pdeathsig) fires
// when the thread that forked it ends, not the process, and Go ends a
// thread when a goroutine locked to it returns; a fork from an ordinary
// goroutine could have its command killed by whatever later locks that
// thread and returns. A forker's thread ends only when its cgroup could
// not be restored after a fork (v1, see cmdGroup.start): a service thread
// stuck in a command's cgroup would be frozen and killed with it, which is
// worse than the commands that thread forked dying (never seen).

// forkers is how many forks can run at once: a fork on a forker takes
// tens of microseconds (clone with CLONE_VFORK until the exec), so a few
// serve thousands of commands a second.
const forkers = 4

type forkReq struct {
	fn   func() (keep bool, err error)
	done chan error
}

var (
	forkQueue    = make(chan forkReq)
	startForkers = sync.OnceFunc(func() {
		for range forkers {
			go forker()
		}
	})
)

func forker() {
	runtime.LockOSThread()
	for r := range forkQueue {
		keep, err := r.fn()
		r.done <- err
		if !keep {
			go forker()
			return // still locked: the thread ends
		}
	}
}

// onForker runs fn, which forks, on a forker's thread; fn reports whether
// the thread may go on serving.
func onForker(fn func() (keep bool, err error)) error {
	startForkers()
	done := make(chan error, 1)
	forkQueue <- forkReq{fn: fn, done: done}
	return <-done
}

// startCmd starts cmd from the calling forker's thread. A command run as
// another user than the service's starts with no_new_privs (inherited from
// the thread, which keeps it: set once, it cannot be cleared, and every
// command a root service runs is another user's): no setuid, setgid or
// file-capability binary raises it or what it runs. Otherwise a sandbox's
// setuid copy of bash, left in /tmp or in a workspace it opened, would
// give its uid to any other sandbox's command, and that uid is given to a
// new sandbox once its own is deleted.
func startCmd(cmd *exec.Cmd) error {
	if cmd.SysProcAttr != nil && cmd.SysProcAttr.Credential != nil {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("set no_new_privs: %w", err)
		}
	}
	return cmd.Start()
}
