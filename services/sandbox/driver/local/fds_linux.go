package local

import (
	"math"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// noStrayDescriptors marks every descriptor of the service above stderr
// close-on-exec, so that a command (or a search program) gets only what
// it is handed: stdin, stdout, stderr and its ExtraFiles. Go opens all
// its own descriptors close-on-exec, but the service inherits whatever
// its launcher left open (a shell's, a supervisor's), and cgo or raw
// syscalls may open more; os/exec passes every such one on. It runs
// before each fork, one syscall (close_range, Linux 5.11); older kernels
// get the same from /proc/self/fd. Descriptors stay open in the service.
func noStrayDescriptors() {
	if unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC) == nil {
		return
	}
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
		}
	}
}
