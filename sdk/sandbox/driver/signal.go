package driver

import "strconv"

// linuxSignals are the names of Linux's signal numbers: a sandbox's commands
// run on Linux whatever the host of the service (a container, a remote VM).
var linuxSignals = map[int]string{
	1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE",
	9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM",
	24: "SIGXCPU", 25: "SIGXFSZ", 31: "SIGSYS",
}

// SignalName names a Linux signal number for [ExecResult].Signal, such as
// "SIGKILL" for 9; a number without a name is "SIG<n>".
func SignalName(n int) string {
	if name, ok := linuxSignals[n]; ok {
		return name
	}
	return "SIG" + strconv.Itoa(n)
}
