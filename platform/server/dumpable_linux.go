package server

import "golang.org/x/sys/unix"

// nonDumpable closes this process's /proc files (environ, mem, fd) to every
// other process but one with CAP_SYS_PTRACE: a service's environment can hold
// keys and tokens, and sandbox commands may run beside it as the same user.
func nonDumpable() error { return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) }
