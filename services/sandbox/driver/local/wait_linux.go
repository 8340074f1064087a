package local

import (
	"syscall"
	"unsafe"
)

// waitExit blocks until process pid has exited, without reaping it. While
// it is an unreaped zombie its pid, and so its process group id, cannot be
// reused, so killing the group afterwards cannot hit a stranger.
func waitExit(pid int) {
	const (
		pPID    = 1
		wNOWAIT = 0x1000000
	)
	var info [128]byte // siginfo_t
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info[0])), syscall.WEXITED|wNOWAIT, 0, 0)
		if errno != syscall.EINTR {
			return
		}
	}
}
